package tools

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// Login runs the browser part of the authorization code flow for the CLI:
// it opens the authorization URL with Browser (else prints it) and takes
// the redirect on a loopback listener. Close it when done. Safe for
// concurrent use.
type Login struct {
	// Browser is the command of $BROWSER (split on spaces; the URL is its
	// last argument); empty prints the URL only.
	Browser string
	// RedirectURL is RELAY_OAUTH_REDIRECT_URL; empty listens on a free
	// loopback port at /callback.
	RedirectURL string
	// Open, when set, opens the URL instead of Browser (tests).
	Open func(ctx context.Context, url string) error
	// Out gets the URL to open and progress lines.
	Out io.Writer
	// Timeout bounds the wait for the redirect. Default 5m.
	Timeout time.Duration
	// External: the redirect comes to another listener (the console's
	// /oauth/callback), which hands it to Deliver; RedirectURL is then its
	// URL and the Login listens on nothing.
	External bool

	once     sync.Once
	redirect string
	err      error
	srv      *http.Server

	mu      sync.Mutex
	waiting map[string]chan callback // by state
}

type callback struct {
	res *auth.AuthorizationResult
	err error
}

// Authorization errors the CLI reports.
var (
	// ErrConsentDenied: the person (or the server) refused the authorization.
	ErrConsentDenied = errors.New("authorization denied")
	// ErrStateMismatch: the redirect's state is not the one sent.
	ErrStateMismatch = errors.New("state mismatch: the redirect does not answer this login's request (refused)")
	// ErrLoginTimeout: no redirect came in time.
	ErrLoginTimeout = errors.New("no authorization redirect arrived in time")
)

// Close stops the redirect listener.
func (l *Login) Close() error {
	if l.srv == nil {
		return nil
	}
	return l.srv.Close()
}

// redirectURL starts the listener once and returns the redirect URI.
func (l *Login) redirectURL() (string, error) {
	l.once.Do(func() { l.redirect, l.err = l.listen() })
	return l.redirect, l.err
}

func (l *Login) listen() (string, error) {
	if l.External {
		if l.RedirectURL == "" {
			return "", errors.New("login: no redirect URL for an external callback")
		}
		return l.RedirectURL, nil
	}
	addr, path, redirect := "127.0.0.1:0", "/callback", ""
	if l.RedirectURL != "" {
		u, err := url.Parse(l.RedirectURL)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("RELAY_OAUTH_REDIRECT_URL: not an absolute URL")
		}
		addr, path, redirect = u.Host, u.Path, l.RedirectURL
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
		if path == "" {
			path = "/"
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("OAuth redirect listener on %s: %w", addr, err)
	}
	if redirect == "" {
		redirect = "http://" + ln.Addr().String() + path
	}
	mux := http.NewServeMux()
	mux.HandleFunc(path, l.serveCallback)
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = l.srv.Serve(ln) }()
	return redirect, nil
}

// errNoLoginWaiting: a redirect came while no login waits for one.
var errNoLoginWaiting = errors.New("no login is waiting for this redirect")

// serveCallback takes the authorization server's redirect.
func (l *Login) serveCallback(w http.ResponseWriter, r *http.Request) {
	cb, err := l.Deliver(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if cb != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "<p>Login failed: %s. You can close this window.</p>", html.EscapeString(cb.Error()))
		return
	}
	fmt.Fprint(w, "<p>Logged in. You can close this window and return to the terminal.</p>")
}

// Deliver hands the authorization server's redirect (its query) to the
// login waiting for it. It returns the redirect's own error (a denied
// consent, a state mismatch), or err when no login waits.
func (l *Login) Deliver(q url.Values) (redirectErr, err error) {
	state := q.Get("state")
	l.mu.Lock()
	ch, ok := l.waiting[state]
	if !ok && len(l.waiting) == 1 {
		for _, c := range l.waiting {
			ch = c // a single login waits: its state does not match
		}
	}
	l.mu.Unlock()
	if ch == nil {
		return nil, errNoLoginWaiting
	}
	var cb callback
	switch {
	case !ok:
		cb.err = ErrStateMismatch
	case q.Get("error") != "":
		cb.err = fmt.Errorf("%w: %s %s", ErrConsentDenied, q.Get("error"), q.Get("error_description"))
	case q.Get("code") == "":
		cb.err = errors.New("the authorization redirect has no code")
	default:
		cb.res = &auth.AuthorizationResult{Code: q.Get("code"), State: state, Iss: q.Get("iss")}
	}
	select {
	case ch <- cb:
	default:
	}
	return cb.err, nil
}

// fetch opens authURL and waits for its redirect.
func (l *Login) fetch(ctx context.Context, server, authURL string) (*auth.AuthorizationResult, error) {
	u, err := url.Parse(authURL)
	if err != nil {
		return nil, err
	}
	state := u.Query().Get("state")
	ch := make(chan callback, 1)
	l.mu.Lock()
	if l.waiting == nil {
		l.waiting = map[string]chan callback{}
	}
	l.waiting[state] = ch
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.waiting, state)
		l.mu.Unlock()
	}()
	out := l.Out
	if out == nil {
		out = io.Discard
	}
	fmt.Fprintf(out, "To log in to %s, open this URL in a browser:\n\n  %s\n\n", server, authURL)
	if l.Open != nil {
		go func() {
			if err := l.Open(ctx, authURL); err != nil {
				fmt.Fprintf(out, "opening the URL failed: %v\n", err)
			}
		}()
	} else if l.Browser != "" {
		args := append(strings.Fields(l.Browser), authURL)
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(out, "$BROWSER (%s) did not start: %v; open the URL yourself\n", args[0], err)
		} else {
			// A desktop browser's command returns at once: the wait goes on
			// until the redirect arrives.
			go func() { _ = cmd.Wait() }()
		}
	}
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case cb := <-ch:
		return cb.res, cb.err
	case <-t.C:
		return nil, fmt.Errorf("%w (%s)", ErrLoginTimeout, timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// LoginServer logs in to remote server s (`relay mcp login`): it connects
// ignoring any stored grant, so the server's 401 starts the authorization
// code flow of cfg.OAuth.Login; the new grant is stored when the flow
// succeeds and the session lists its tools. A server that never asks for
// authorization is an error (nothing is stored).
func LoginServer(ctx context.Context, cfg Config, s mcpconfig.Server) error {
	if cfg.OAuth == nil || cfg.OAuth.Login == nil || cfg.OAuth.Tokens == nil {
		return errors.New("login: no token store or login configured")
	}
	if !mcpconfig.Remote(s.Type) {
		return fmt.Errorf("server %s: login works on remote servers (type http or sse), not %s", s.Name, s.Type)
	}
	if s.OAuth != nil && s.OAuth.Grant == mcpconfig.GrantClientCredentials {
		return fmt.Errorf("server %s: uses the client_credentials grant: the relay gets its tokens itself, no login needed", s.Name)
	}
	if PerUser(s) && cmpOr(cfg.OAuth.Principal, PrincipalTeam) == PrincipalTeam {
		return fmt.Errorf("server %s connects each person's own account: each person connects with `%s` in Slack", s.Name, ConnectCommand(s.Name))
	}
	r := &Runner{cfg: cfg}
	h, err := r.oauthHandler(s, "")
	if err != nil {
		return err
	}
	oh := h.(*oauthHandler)
	oh.fresh = true
	endpoint, client, err := remoteEndpoint(cfg.HTTPClient, s)
	if err != nil {
		return err
	}
	t := remoteTransport(s, endpoint, client, oh, -1)
	cl := mcp.NewClient(&mcp.Implementation{Name: cmpOr(cfg.ClientName, "relay"), Version: cmpOr(cfg.ClientVersion, "dev")}, nil)
	session, err := cl.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: s.ProtocolVersion})
	if err != nil {
		return fmt.Errorf("server %s: %w", s.Name, err)
	}
	defer session.Close()
	if _, err := session.ListTools(ctx, nil); err != nil {
		return fmt.Errorf("server %s: list tools after login: %w", s.Name, err)
	}
	oh.mu.Lock()
	logged := oh.src != nil
	oh.mu.Unlock()
	if !logged {
		return fmt.Errorf("server %s did not ask for authorization: nothing to log in to", s.Name)
	}
	return nil
}

// LogoutServer revokes (RFC 7009, when the authorization server advertised
// a revocation endpoint) and deletes the grant of server and principal.
// revoked says whether the server took the revocation.
func LogoutServer(ctx context.Context, tokens TokenStore, client *http.Client, server, principal string) (revoked bool, err error) {
	if client == nil {
		client = http.DefaultClient
	}
	principal = cmpOr(principal, PrincipalTeam)
	g, _, err := tokens.Load(ctx, server, principal)
	if errors.Is(err, ErrNoGrant) {
		return false, fmt.Errorf("server %s: no login stored for %s", server, principal)
	}
	if err != nil {
		return false, err
	}
	if g.RevocationURL != "" {
		revoked = true
		for _, tok := range []struct{ v, hint string }{{g.RefreshToken, "refresh_token"}, {g.AccessToken, "access_token"}} {
			if tok.v == "" {
				continue
			}
			if err := revoke(ctx, client, g, tok.v, tok.hint); err != nil {
				revoked = false
				err = fmt.Errorf("server %s: revoke the %s: %w (the login is deleted here anyway)", server, tok.hint, err)
				if derr := tokens.Delete(ctx, server, principal); derr != nil {
					return false, errors.Join(err, derr)
				}
				return false, err
			}
		}
	}
	return revoked, tokens.Delete(ctx, server, principal)
}

func revoke(ctx context.Context, client *http.Client, g *Grant, token, hint string) error {
	form := url.Values{"token": {token}, "token_type_hint": {hint}}
	if g.ClientSecret == "" || g.AuthStyle == oauth2.AuthStyleInParams {
		form.Set("client_id", g.ClientID)
		if g.ClientSecret != "" {
			form.Set("client_secret", g.ClientSecret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.RevocationURL, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if g.ClientSecret != "" && g.AuthStyle != oauth2.AuthStyleInParams {
		req.SetBasicAuth(url.QueryEscape(g.ClientID), url.QueryEscape(g.ClientSecret))
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revocation endpoint answered %s", resp.Status)
	}
	return nil
}
