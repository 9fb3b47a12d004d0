package tools

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/oauthtest"
)

// TestPerUserConnections: a per-user server ("oauth": {"per": "user"})
// used by two people who connected different identities: the server sees
// each one's own token; a person without a connection, and a call acting
// for nobody, are refused naming the person and the command, never served
// with someone else's token; the audit names the principal.
func TestPerUserConnections(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{Scopes: []string{"read"}})
	store := NewFileTokenStore(filepath.Join(t.TempDir(), "oauth"), testSealer(t))
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion,
		OAuth: &mcpconfig.OAuth{Per: "user", Grant: mcpconfig.GrantAuthorizationCode}}
	cfg := fastConfig(t, s)
	cfg.OAuth = &OAuthConfig{Tokens: store}
	cfg.Logger = testenv.Logger(t, slog.LevelWarn)
	r := startUnready(t, cfg)
	testenv.WaitFor(t, 20*time.Second, "needs_login", func() bool { return r.Servers()[0].State == StateNeedsLogin })
	if st := r.Servers()[0]; !strings.Contains(st.LastError, ConnectCommand("hosted")) {
		t.Errorf("got status note %q, want it to name %q", st.LastError, ConnectCommand("hosted"))
	}

	if err := login(t, store, s, nil); err == nil || !strings.Contains(err.Error(), ConnectCommand("hosted")) {
		t.Errorf("team login of a per-user server: got %v, want a refusal naming %q", err, ConnectCommand("hosted"))
	}
	for _, p := range []struct{ principal, user string }{{"U1ALICE", "alice"}, {"U2BOB", "bob"}} {
		srv.SetUser(p.user)
		if err := loginAs(t, store, s, p.principal); err != nil {
			t.Fatalf("login of %s: %v", p.principal, err)
		}
	}
	call := func(principal string) *Result {
		return r.Call(t.Context(), Request{Tool: "hosted.whoami", Args: map[string]any{}, Operator: true, Principal: principal})
	}
	for _, p := range []struct{ principal, want string }{{"U1ALICE", "user:alice"}, {"U2BOB", "user:bob"}, {"U1ALICE", "user:alice"}} {
		res := call(p.principal)
		if res.Err != nil || !strings.Contains(fmt.Sprint(res.Content), p.want) {
			t.Fatalf("call as %s: got %v %v, want %s", p.principal, res.Content, res.Err, p.want)
		}
	}

	for _, principal := range []string{"U3CAROL", ""} {
		res := call(principal)
		var lerr *NeedsLoginError
		if !errors.As(res.Err, &lerr) || !lerr.PerUser || lerr.Principal != principal {
			t.Fatalf("call as %q without a connection: got %v, want a per-user NeedsLoginError for %q", principal, res.Err, principal)
		}
		if !strings.Contains(res.Err.Error(), ConnectCommand("hosted")) {
			t.Errorf("got %q, want it to name %q", res.Err, ConnectCommand("hosted"))
		}
		if res.Attempts != 0 {
			t.Errorf("got %d attempts, want 0 (nothing sent with another person's token)", res.Attempts)
		}
	}

	// A logout ends the person's session: the next call is refused.
	if _, err := LogoutServer(t.Context(), store, nil, "hosted", "U2BOB"); err != nil {
		t.Fatal(err)
	}
	r.DropPrincipal("hosted", "U2BOB")
	if res := call("U2BOB"); !errors.Is(res.Err, ErrNeedsLogin) {
		t.Errorf("call after logout: got %v, want ErrNeedsLogin", res.Err)
	}

	recs := readAudit(t, r)
	got := map[string]int{}
	for _, rec := range recs {
		got[rec.Principal+"/"+string(rec.Status)]++
	}
	if got["U1ALICE/success"] != 2 || got["U2BOB/success"] != 1 || got["U3CAROL/error"] != 1 || got["U2BOB/error"] != 1 {
		t.Errorf("got audit principals %v, want U1ALICE/success 2, U2BOB/success 1, U3CAROL/error 1, U2BOB/error 1", got)
	}
}

// loginAs logs principal in to s with a browser that follows the redirect.
func loginAs(t *testing.T, store TokenStore, s mcpconfig.Server, principal string) error {
	t.Helper()
	l := &Login{Open: oauthtest.FollowRedirect, Timeout: 20 * time.Second}
	defer l.Close()
	return LoginServer(t.Context(), Config{OAuth: &OAuthConfig{Tokens: store, Login: l, Principal: principal}}, s)
}

// TestPerUserToolList: a per-user server has no session of its own; its
// tools are listed (for the agent's and the code runs' checks) through the
// session of a person who connected, once someone has.
func TestPerUserToolList(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{})
	store := NewFileTokenStore(filepath.Join(t.TempDir(), "oauth"), testSealer(t))
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion,
		OAuth: &mcpconfig.OAuth{Per: "user"}}
	cfg := fastConfig(t, s)
	cfg.OAuth = &OAuthConfig{Tokens: store}
	r := startUnready(t, cfg)
	testenv.WaitFor(t, 20*time.Second, "needs_login", func() bool { return r.Servers()[0].State == StateNeedsLogin })
	if got := hostedTools(t, r); got != nil {
		t.Fatalf("got tools %v before anyone connected, want none", got)
	}
	if err := loginAs(t, store, s, "U9EVE"); err != nil {
		t.Fatal(err)
	}
	got := hostedTools(t, r)
	if len(got) != 1 || got[0].Name != "hosted.whoami" {
		t.Fatalf("got tools %v, want hosted.whoami", got)
	}
}

// hostedTools lists the tools of server "hosted" (nil on an error).
func hostedTools(t *testing.T, r *Runner) []ToolInfo {
	list, err := r.AllTools(t.Context(), "hosted")
	if err != nil {
		return nil
	}
	return list
}
