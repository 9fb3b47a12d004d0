package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/oauthtest"
)

func testSealer(t testing.TB) *Sealer {
	t.Helper()
	s, err := NewSealer(secret.New("test-secret-key-0123456789abcdef-xyz"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// login runs LoginServer on s with a browser that follows the redirect.
func login(t *testing.T, store TokenStore, s mcpconfig.Server, mod func(*Login)) error {
	t.Helper()
	l := &Login{Open: oauthtest.FollowRedirect, Out: io.Discard, Timeout: 20 * time.Second}
	if mod != nil {
		mod(l)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return LoginServer(ctx, Config{OAuth: &OAuthConfig{Tokens: store, Login: l}}, s)
}

func whoami(t *testing.T, r *Runner) *Result {
	t.Helper()
	return r.Call(t.Context(), Request{Tool: "hosted.whoami", Args: map[string]any{}, Operator: true})
}

// TestOAuthEndToEnd: a real OAuth-protected server (go-sdk middleware, a
// small authorization server). 401 -> needs_login -> login -> call; an
// access token near expiry is refreshed before the call (no 401); one the
// server expired early is refreshed on its 401 and the call still
// succeeds; a revoked grant returns the server to needs_login with one
// notice.
func TestOAuthEndToEnd(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{Scopes: []string{"read"}, AccessTTL: 2 * time.Second})
	store := NewFileTokenStore(filepath.Join(t.TempDir(), "oauth"), testSealer(t))
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion}
	cfg := fastConfig(t, s)
	cfg.OAuth = &OAuthConfig{Tokens: store}
	cfg.Logger = testenv.Logger(t, slog.LevelWarn)
	var notes recorder[Notice]
	cfg.Notify = notes.notify
	r := startUnready(t, cfg)
	testenv.WaitFor(t, 20*time.Second, "needs_login", func() bool { return r.Servers()[0].State == StateNeedsLogin })

	if err := login(t, store, s, nil); err != nil {
		t.Fatalf("login: %v", err)
	}
	if got := srv.LastResource(); got != srv.MCP {
		t.Errorf("got resource %q in the token request, want %q", got, srv.MCP)
	}
	files, _ := filepath.Glob(filepath.Join(store.dir, "t.*"))
	if len(files) != 1 {
		t.Fatalf("got grant files %v, want 1", files)
	}
	if st, _ := os.Stat(files[0]); st.Mode().Perm() != 0o600 {
		t.Errorf("got mode %v, want 0600", st.Mode().Perm())
	}
	raw, _ := os.ReadFile(files[0])
	if g, _, _ := store.Load(t.Context(), "hosted", PrincipalTeam); g == nil || strings.Contains(string(raw), g.AccessToken) {
		t.Errorf("the grant file holds the access token in clear (or no grant)")
	}

	testenv.WaitFor(t, 20*time.Second, "ready after the login", func() bool { return r.Servers()[0].State == StateReady })
	// The access token lives 2s: past half its life the next use
	// refreshes it first, so the server never sees it expired.
	g, _, err := store.Load(t.Context(), "hosted", PrincipalTeam)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the access token to be due for refresh", g.due)
	before401 := srv.Unauthorized.Load()
	if res := whoami(t, r); res.Err != nil || !strings.Contains(fmt.Sprint(res.Content), "user:alice") {
		t.Fatalf("got %v %v, want user:alice", res.Content, res.Err)
	}
	// The call (or a health ping before it) refreshed the token in time.
	if srv.Refreshes.Load() == 0 || srv.Unauthorized.Load() != before401 {
		t.Errorf("got %d refreshes and %d new 401s, want a refresh and no 401", srv.Refreshes.Load(), srv.Unauthorized.Load()-before401)
	}

	t.Run("expired early: refreshed on the 401", func(t *testing.T) {
		srv.ExpireAccess()
		if res := whoami(t, r); res.Err != nil {
			t.Fatalf("call after the server expired the token: %v", res.Err)
		}
	})

	t.Run("revoked: needs_login and one notice", func(t *testing.T) {
		n := len(notes.all())
		srv.RevokeAll()
		res := whoami(t, r)
		if !errors.Is(res.Err, ErrNeedsLogin) {
			t.Fatalf("got %v, want ErrNeedsLogin", res.Err)
		}
		testenv.WaitFor(t, 20*time.Second, "needs_login", func() bool { return r.Servers()[0].State == StateNeedsLogin })
		_ = whoami(t, r)
		got := 0
		for _, x := range notes.all()[n:] {
			if x.Kind == NoticeNeedsLogin {
				got++
			}
		}
		if got != 1 {
			t.Errorf("got %d needs-login notices, want 1", got)
		}
		if st := r.Servers()[0]; st.Failures != 0 || st.State == StateDisabled {
			t.Errorf("got %d failures, state %s; want 0, not disabled", st.Failures, st.State)
		}
	})
}

// TestLoginErrors: what a login that cannot succeed says.
func TestLoginErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts oauthtest.Options
		mod  func(*Login)
		want error
		text string
	}{
		{name: "denied", opts: oauthtest.Options{Deny: true}, want: ErrConsentDenied, text: "access_denied"},
		{name: "no S256", opts: oauthtest.Options{NoS256: true}, want: ErrNoS256},
		{name: "wrong iss", opts: oauthtest.Options{WrongIss: true}, text: "does not match expected issuer"},
		{name: "state mismatch", mod: func(l *Login) {
			l.Open = func(ctx context.Context, u string) error {
				return oauthtest.FollowRedirect(ctx, strings.Replace(u, "state=", "state=forged", 1))
			}
		}, want: ErrStateMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := oauthtest.Start(t, tt.opts)
			store := NewFileTokenStore(t.TempDir(), testSealer(t))
			err := login(t, store, mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP}, tt.mod)
			if err == nil || tt.want != nil && !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("got %v, want %v %q", err, tt.want, tt.text)
			}
			if _, _, err := store.Load(t.Context(), "hosted", PrincipalTeam); !errors.Is(err, ErrNoGrant) {
				t.Errorf("got %v, want nothing stored", err)
			}
		})
	}
}

func TestLogoutRevokes(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{})
	store := NewFileTokenStore(t.TempDir(), testSealer(t))
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion}
	if err := login(t, store, s, nil); err != nil {
		t.Fatal(err)
	}
	revoked, err := LogoutServer(t.Context(), store, nil, "hosted", "")
	if err != nil || !revoked || srv.Revoked.Load() != 2 {
		t.Fatalf("got revoked %v, err %v, %d tokens revoked; want true, nil, 2", revoked, err, srv.Revoked.Load())
	}
	if _, _, err := store.Load(t.Context(), "hosted", PrincipalTeam); !errors.Is(err, ErrNoGrant) {
		t.Errorf("got %v after logout, want ErrNoGrant", err)
	}
}

func TestClientCredentials(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{ClientID: "relay-bot", ClientSecret: "s3cret-value"})
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP,
		OAuth: &mcpconfig.OAuth{Grant: mcpconfig.GrantClientCredentials, ClientID: "relay-bot", ClientSecret: "s3cret-value"}}
	r := startUnready(t, fastConfig(t, s))
	testenv.WaitFor(t, 20*time.Second, "ready", func() bool { return r.Servers()[0].State == StateReady })
	if res := whoami(t, r); res.Err != nil || !strings.Contains(fmt.Sprint(res.Content), "user:client:relay-bot") {
		t.Fatalf("got %v %v, want the client's identity", res.Content, res.Err)
	}
}

func TestSealer(t *testing.T) {
	t.Parallel()
	s := testSealer(t)
	g := &Grant{Server: "a", Issuer: "https://as", Principal: "team", AccessToken: "at-secret", RefreshToken: "rt-secret"}
	b, err := s.Seal("k1", g)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "secret") {
		t.Error("sealed value holds the token in clear")
	}
	if got, err := s.Open("k1", b); err != nil || got.AccessToken != "at-secret" {
		t.Errorf("got %v %v, want the grant back", got, err)
	}
	if _, err := s.Open("k2", b); !errors.Is(err, ErrSealed) {
		t.Errorf("opened under another key: got %v, want ErrSealed", err)
	}
	other, _ := NewSealer(secret.New("another-secret-key-0123456789abcdef"))
	if _, err := other.Open("k1", b); !errors.Is(err, ErrSealed) {
		t.Errorf("opened with another RELAY_SECRET_KEY: got %v, want ErrSealed", err)
	}
	if _, err := NewSealer(secret.Value{}); !errors.Is(err, ErrNoSecretKey) {
		t.Errorf("got %v, want ErrNoSecretKey", err)
	}
	if _, err := NewSealer(secret.New("short")); err == nil {
		t.Error("a short key was accepted")
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, g); strings.Contains(out, "secret") {
			t.Errorf("%s prints the tokens: %s", f, out)
		}
	}
}

// A call whose session the health check closed because the login ended
// reports the login (ErrNeedsLogin), not a lost connection, and does not
// count against the server: the flake TestOAuthEndToEnd/revoked once showed.
func TestClosedByEndedLoginIsNeedsLogin(t *testing.T) {
	t.Parallel()
	c := &conn{cfg: mcpconfig.Server{Name: "hosted"}}
	c.health.needsLogin, c.health.lastErr = true, "ping: needs login"
	var counted error = errors.New("done not called")
	err := c.classify(context.Background(), fmt.Errorf("calling tools/call: %w", mcp.ErrConnectionClosed), func(e error) { counted = e })
	if !errors.Is(err, ErrNeedsLogin) {
		t.Errorf("got %v, want ErrNeedsLogin", err)
	}
	if counted != nil {
		t.Errorf("the breaker was told %v, want nil", counted)
	}
	if c.fatal.Load() {
		t.Error("the breaker would trip at once: the login is not the server's failure")
	}
}

// TestOAuthSSE: a server on the older HTTP+SSE transport behind OAuth gets
// the same as a streamable one (the SDK's SSE client has no OAuth of its
// own): 401 -> needs_login -> login -> call as the logged-in user; a token
// the server expired early is refreshed on the 401 of a message POST and the
// call succeeds.
func TestOAuthSSE(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{Scopes: []string{"read"}, SSE: true})
	store := NewFileTokenStore(filepath.Join(t.TempDir(), "oauth"), testSealer(t))
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.SSE, URL: srv.MCP}
	cfg := fastConfig(t, s)
	cfg.OAuth = &OAuthConfig{Tokens: store}
	cfg.Logger = testenv.Logger(t, slog.LevelWarn)
	r := startUnready(t, cfg)
	testenv.WaitFor(t, 20*time.Second, "needs_login", func() bool { return r.Servers()[0].State == StateNeedsLogin })
	if res := whoami(t, r); !errors.Is(res.Err, ErrNeedsLogin) {
		t.Fatalf("before the login: got %v, want ErrNeedsLogin", res.Err)
	}

	if err := login(t, store, s, nil); err != nil {
		t.Fatalf("login: %v", err)
	}
	testenv.WaitFor(t, 20*time.Second, "ready after the login", func() bool { return r.Servers()[0].State == StateReady })
	if res := whoami(t, r); res.Err != nil || !strings.Contains(fmt.Sprint(res.Content), "user:alice") {
		t.Fatalf("got %v %v, want user:alice", res.Content, res.Err)
	}

	srv.ExpireAccess()
	refreshes := srv.Refreshes.Load()
	if res := whoami(t, r); res.Err != nil {
		t.Fatalf("call after the server expired the token: %v", res.Err)
	}
	if srv.Refreshes.Load() == refreshes {
		t.Error("no refresh after the server expired the token")
	}
}

// A temporary file that a process killed inside Save left is removed by the
// next Save once it is stale; a fresh one (another process's Save under
// way) is kept.
func TestFileTokenStoreSweepsKilledSaves(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "oauth")
	store := NewFileTokenStore(dir, testSealer(t))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(dir, ".tmp-killed"), filepath.Join(dir, ".tmp-running")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("half a grant"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	g := &Grant{Server: "hosted", Issuer: "https://as.example", Principal: PrincipalTeam, AccessToken: "at", Saved: time.Now()}
	if _, err := store.Save(t.Context(), g, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale temporary file is still there (%v)", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("the fresh temporary file was removed: %v", err)
	}
}

// A hostile server that answers with the access token its call carried
// puts nothing of it into the result: the grant's tokens are known secrets
// of the process (every redactor, the log handler's too, removes them), and
// after a refresh the new token is.
func TestOAuthTokenEchoedIsRedacted(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{Scopes: []string{"read"}, LeakToken: true})
	store := NewFileTokenStore(filepath.Join(t.TempDir(), "oauth"), testSealer(t))
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion}
	if err := login(t, store, s, nil); err != nil {
		t.Fatalf("login: %v", err)
	}
	cfg := fastConfig(t, s)
	cfg.OAuth = &OAuthConfig{Tokens: store}
	r := startUnready(t, cfg)
	testenv.WaitFor(t, 20*time.Second, "ready", func() bool { return r.Servers()[0].State == StateReady })
	for _, when := range []string{"after the login", "after a refresh"} {
		res := r.Call(t.Context(), Request{Tool: "hosted.leak-token", Args: map[string]any{}, Operator: true})
		g, _, err := store.Load(t.Context(), "hosted", PrincipalTeam)
		if err != nil || res.Err != nil {
			t.Fatalf("%s: %v %v", when, err, res.Err)
		}
		got := fmt.Sprint(res.Content)
		if strings.Contains(got, g.AccessToken) || !strings.Contains(got, "your token is "+Redacted) {
			t.Errorf("%s: got %q, want the token redacted", when, got)
		}
		srv.ExpireAccess()
	}
	if srv.Refreshes.Load() == 0 {
		t.Error("no refresh happened")
	}
}
