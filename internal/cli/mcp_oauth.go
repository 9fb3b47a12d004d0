package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// loginTimeout bounds the wait for a person to finish a login in a browser.
const loginTimeout = 5 * time.Minute

// tokenStore opens where OAuth grants live: the token bucket on the bus
// when a relay's NATS answers, else the data dir (RELAY_DATA_DIR/oauth).
// where names it for messages; done closes the bus.
func (a *app) tokenStore(ctx context.Context, ts *toolrunner.Settings) (store tools.TokenStore, where string, done func(), err error) {
	sealer, err := ts.OAuth.Sealer()
	if err != nil {
		return nil, "", nil, &exitError{code: 1, msg: err.Error()}
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if b, err := a.clientBus(cctx); err == nil {
		kv, err := toolrunner.OpenTokens(cctx, b, sealer)
		if err == nil {
			return kv, "the bucket " + toolrunner.TokenBucket(b.Prefix()) + " (shared by every relay process on the bus)", b.Close, nil
		}
		b.Close()
		fmt.Fprintf(a.stderr, "OAuth token bucket: %v; using the data dir\n", err)
	}
	dir := filepath.Join(ts.DataDir, "oauth")
	return tools.NewFileTokenStore(dir, sealer), dir + " (this machine only: no relay bus answered)", func() {}, nil
}

// newLogin is the browser side of a login: $BROWSER unless noBrowser,
// RELAY_OAUTH_REDIRECT_URL.
func (a *app) newLogin(ts *toolrunner.Settings, noBrowser bool) *tools.Login {
	l := &tools.Login{RedirectURL: ts.OAuth.RedirectURL, Out: a.stderr, Timeout: loginTimeout}
	if !noBrowser {
		l.Browser = a.env.String("BROWSER", "")
	}
	return l
}

// serverArgs reads `<server> [flags]`: the server's entry, once fs parsed
// the flags after it; usage when no server is named.
func serverArgs(ts *toolrunner.Settings, args []string, usage string, fs *flag.FlagSet) (mcpconfig.Server, error) {
	if len(args) == 0 || isHelp(args[0]) {
		return mcpconfig.Server{}, &exitError{code: 2, msg: usage}
	}
	s, err := findServer(ts, args[0])
	if err != nil {
		return mcpconfig.Server{}, err
	}
	return s, fs.Parse(args[1:])
}

func mcpLogin(ctx context.Context, a *app, ts *toolrunner.Settings, args []string) error {
	fs := a.flags("mcp login")
	noBrowser := fs.Bool("no-browser", false, "print the URL instead of opening $BROWSER")
	s, err := serverArgs(ts, args, "usage: relay mcp login <server> [--no-browser]", fs)
	if err != nil {
		return err
	}
	store, where, done, err := a.tokenStore(ctx, ts)
	if err != nil {
		return err
	}
	defer done()
	l := a.newLogin(ts, *noBrowser)
	defer l.Close()
	cfg := ts.Runner
	cfg.OAuth = &tools.OAuthConfig{Tokens: store, Login: l, ClientMetadataURL: ts.OAuth.ClientMetadataURL}
	lctx, cancel := context.WithTimeout(ctx, loginTimeout+30*time.Second)
	defer cancel()
	if err := tools.LoginServer(lctx, cfg, s); err != nil {
		return &exitError{code: 1, msg: "relay mcp login: " + err.Error()}
	}
	fmt.Fprintf(a.stdout, "logged in to %s; tokens stored encrypted in %s\n", s.Name, where)
	return nil
}

func mcpLogout(ctx context.Context, a *app, ts *toolrunner.Settings, args []string) error {
	fs := a.flags("mcp logout")
	user := fs.String("user", "", "the person whose connection to remove (per-user servers); default the team's")
	s, err := serverArgs(ts, args, "usage: relay mcp logout <server> [--user U]", fs)
	if err != nil {
		return err
	}
	store, where, done, err := a.tokenStore(ctx, ts)
	if err != nil {
		return err
	}
	defer done()
	revoked, err := tools.LogoutServer(ctx, store, ts.Runner.HTTPClient, s.Name, *user)
	if err != nil {
		return &exitError{code: 1, msg: "relay mcp logout: " + err.Error()}
	}
	how := "deleted (the authorization server advertises no revocation endpoint)"
	if revoked {
		how = "revoked and deleted"
	}
	fmt.Fprintf(a.stdout, "logged out of %s: tokens %s from %s\n", s.Name, how, where)
	return nil
}

// callOAuth gives `relay mcp call` on remote server s the stored grant and
// the login flow (a 401 or insufficient_scope mid-call logs in again). It
// returns nil without a RELAY_SECRET_KEY: then a server asking for a login
// is reported as needing one.
func callOAuth(ctx context.Context, a *app, ts *toolrunner.Settings, s mcpconfig.Server) (*tools.OAuthConfig, func()) {
	if !mcpconfig.Remote(s.Type) || !ts.OAuth.SecretKey.IsSet() {
		return nil, func() {}
	}
	store, _, done, err := a.tokenStore(ctx, ts)
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			fmt.Fprintf(a.stderr, "relay mcp call: no OAuth: %s\n", ee.msg)
		}
		return nil, func() {}
	}
	l := a.newLogin(ts, false)
	return &tools.OAuthConfig{Tokens: store, Login: l, ClientMetadataURL: ts.OAuth.ClientMetadataURL}, func() { l.Close(); done() }
}

// oauthConnector is the console's OAuth flow (tools.Connector) on the
// servers of mcp.json: grants in the token bucket of b, links checked with
// RELAY_SECRET_KEY and used once (the bucket of used links). nil without
// RELAY_SECRET_KEY: the console then connects nothing.
func oauthConnector(ctx context.Context, ts *toolrunner.Settings, b *bus.Bus) (*tools.Connector, error) {
	sealer, err := ts.OAuth.Sealer()
	if err != nil {
		return nil, nil
	}
	links, err := tools.NewLinkSigner(ts.OAuth.SecretKey)
	if err != nil {
		return nil, err
	}
	tokens, err := toolrunner.OpenTokens(ctx, b, sealer)
	if err != nil {
		return nil, err
	}
	nonces, err := toolrunner.OpenLinkNonces(ctx, b)
	if err != nil {
		return nil, err
	}
	return &tools.Connector{Runner: ts.Runner, Servers: ts.Servers, Tokens: tokens, ClientMetadataURL: ts.OAuth.ClientMetadataURL,
		Links: links, Nonces: nonces}, nil
}

// connectLinks makes the links of `/relay connect` to the console at
// consoleURL; nil without RELAY_SECRET_KEY.
func connectLinks(ts *toolrunner.Settings, consoleURL string) *tools.ConnectLinks {
	links, err := tools.NewLinkSigner(ts.OAuth.SecretKey)
	if err != nil {
		return nil
	}
	return &tools.ConnectLinks{Signer: links, ConsoleURL: consoleURL, Servers: ts.Servers}
}
