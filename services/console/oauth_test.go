package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/console"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/oauthtest"
)

// TestConnectLinkWithoutSignIn: on a console with a token, a person's
// signed link is the one way in without signing in: it starts their flow
// once, the authorization server's redirect to /oauth/callback stores the
// grant under their Slack user id; the same link again, a changed link
// and the operator's OAuth actions without a session or CSRF token are
// refused.
func TestConnectLinkWithoutSignIn(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{User: "dave"})
	key := secret.New("test-secret-key-0123456789abcdef-xyz")
	sealer, err := tools.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	links, err := tools.NewLinkSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	store := tools.NewFileTokenStore(filepath.Join(t.TempDir(), "oauth"), sealer)
	per := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion,
		OAuth: &mcpconfig.OAuth{Per: "user"}}
	conn := &tools.Connector{Servers: []mcpconfig.Server{per}, Tokens: store, Links: links, Nonces: &tools.MemoryNonces{}, Timeout: 20 * time.Second}
	const token = "console-t0ken-for-tests"
	base, b := startConsole(t, console.Config{Token: secret.New(token), Connect: conn})
	// The tool runner's status, as a running one answers it: the per-user
	// server needs each person's login.
	sub, err := b.Conn().Subscribe(b.Prefix()+"."+tools.SubjectStatus, func(m *nats.Msg) {
		body, _ := json.Marshal(tools.StatusResponse{Servers: []tools.ServerStatus{{Name: "hosted", Type: "http", State: tools.StateNeedsLogin}}})
		_ = m.Respond(body)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	link := links.Sign("hosted", "U4DAVE")
	browser := newClient(t, base) // the person's browser: never signed in to the console
	code, _, h := browser.do(http.MethodGet, "/oauth/connect?t="+url.QueryEscape(link), nil)
	authURL := h.Get("Location")
	if code != http.StatusSeeOther || !strings.HasPrefix(authURL, srv.AS+"/authorize") {
		t.Fatalf("open the link: %d to %q, want 303 to the authorization server", code, authURL)
	}
	if u, _ := url.Parse(authURL); u.Query().Get("redirect_uri") != base+console.CallbackPath {
		t.Errorf("got redirect_uri %q, want %q", u.Query().Get("redirect_uri"), base+console.CallbackPath)
	}
	resp, err := browser.http.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cb, _ := url.Parse(resp.Header.Get("Location"))
	if code, body, _ := browser.do(http.MethodGet, cb.RequestURI(), nil); code != http.StatusOK || !strings.Contains(body, "hosted is connected for you") {
		t.Fatalf("callback: %d %q, want 200 connected", code, body)
	}
	if _, _, err := store.Load(t.Context(), "hosted", "U4DAVE"); err != nil {
		t.Errorf("no grant stored for U4DAVE: %v", err)
	}
	if _, _, err := store.Load(t.Context(), "hosted", tools.PrincipalTeam); err == nil {
		t.Errorf("a team grant was stored too")
	}

	if code, _, _ := browser.do(http.MethodGet, "/oauth/connect?t="+url.QueryEscape(link), nil); code != http.StatusGone {
		t.Errorf("the same link again: %d, want 410", code)
	}
	forged := links.Sign("hosted", "U4DAVE")
	forged = forged[:len(forged)-2] + "AA"
	if code, _, _ := browser.do(http.MethodGet, "/oauth/connect?t="+url.QueryEscape(forged), nil); code != http.StatusForbidden {
		t.Errorf("a changed link: %d, want 403", code)
	}
	if code, _, _ := browser.do(http.MethodGet, "/tools", nil); code != http.StatusSeeOther {
		t.Errorf("the link signed nobody in: GET /tools %d, want 303 to /login", code)
	}
	for _, path := range []string{"/oauth/start", "/oauth/disconnect"} {
		if code, _, _ := browser.do(http.MethodPost, path, url.Values{"server": {"hosted"}, "user": {"U4DAVE"}}); code != http.StatusUnauthorized {
			t.Errorf("POST %s without a session: %d, want 401", path, code)
		}
	}

	op := newClient(t, base)
	if code, _, _ := op.do(http.MethodPost, "/login", url.Values{"operator": {"olga"}, "token": {token}}); code != http.StatusSeeOther {
		t.Fatalf("sign in: %d", code)
	}
	if code, _, _ := op.do(http.MethodPost, "/oauth/disconnect", url.Values{"server": {"hosted"}, "user": {"U4DAVE"}}); code != http.StatusForbidden {
		t.Errorf("disconnect without the CSRF token: %d, want 403", code)
	}
	// The tools page lists who connected, each with a Disconnect.
	_, page, _ := op.do(http.MethodGet, "/tools", nil)
	if !strings.Contains(page, `name="user" value="U4DAVE"`) || !strings.Contains(page, "<code>U4DAVE</code>") {
		t.Errorf("the tools page does not list U4DAVE's connection with a Disconnect:\n%s", page)
	}
	csrf := op.csrf("/dlq")
	code, _, h = op.do(http.MethodPost, "/oauth/disconnect", url.Values{"server": {"hosted"}, "user": {"U4DAVE"}, "csrf": {csrf}, "back": {"/tools"}})
	if code != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "Disconnected") {
		t.Errorf("disconnect: %d to %q, want 303 with a notice", code, h.Get("Location"))
	}
	if _, _, err := store.Load(t.Context(), "hosted", "U4DAVE"); err == nil {
		t.Errorf("the grant of U4DAVE is still stored after the disconnect")
	}
	if _, page, _ := op.do(http.MethodGet, "/tools", nil); strings.Contains(page, "U4DAVE") || !strings.Contains(page, "nobody connected yet") {
		t.Errorf("after the disconnect the tools page still lists U4DAVE, or not that nobody is connected")
	}
}
