package tools

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/oauthtest"
)

func testLinks(t *testing.T) *LinkSigner {
	t.Helper()
	l, err := NewLinkSigner(secret.New("test-secret-key-0123456789abcdef-xyz"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestConnectLinks: a link verifies with the key that signed it, for 10
// minutes, once; a changed or foreign one does not.
func TestConnectLinks(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s := testLinks(t)
	s.Now = func() time.Time { return now }
	tok := s.Sign("hosted", "U1")
	l, err := s.Verify(tok)
	if err != nil || l.Server != "hosted" || l.Principal != "U1" {
		t.Fatalf("got %+v %v, want hosted/U1", l, err)
	}
	other, _ := NewLinkSigner(secret.New("another-secret-key-0123456789abcdef"))
	p, sig, _ := strings.Cut(tok, ".")
	forged := strings.Replace(p, p[:4], "AAAA", 1) + "." + sig
	for name, bad := range map[string]string{"foreign key": other.Sign("hosted", "U1"), "changed payload": forged, "no signature": p, "empty": ""} {
		if _, err := s.Verify(bad); !errors.Is(err, ErrLinkInvalid) {
			t.Errorf("%s: got %v, want ErrLinkInvalid", name, err)
		}
	}
	now = now.Add(ConnectLinkTTL)
	if _, err := s.Verify(tok); !errors.Is(err, ErrLinkExpired) {
		t.Errorf("after 10 minutes: got %v, want ErrLinkExpired", err)
	}
	var n MemoryNonces
	if err := n.Use(t.Context(), l.Nonce, l.Expires); err != nil {
		t.Fatal(err)
	}
	if err := n.Use(t.Context(), l.Nonce, l.Expires); !errors.Is(err, ErrLinkUsed) {
		t.Errorf("second use: got %v, want ErrLinkUsed", err)
	}
}

// browse GETs authURL without following the authorization server's
// redirect: the query of its Location (the callback's).
func browse(t *testing.T, authURL string) url.Values {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("got %s %q, want a redirect", resp.Status, resp.Header.Get("Location"))
	}
	return loc.Query()
}

// TestConnector: the console's flow stores a person's grant under their
// principal; a callback for no flow, and a person connecting a team-wide
// server, are refused.
func TestConnector(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{User: "carol"})
	store := NewFileTokenStore(filepath.Join(t.TempDir(), "oauth"), testSealer(t))
	per := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion,
		OAuth: &mcpconfig.OAuth{Per: "user"}}
	team := mcpconfig.Server{Name: "teamwide", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion}
	c := &Connector{Servers: []mcpconfig.Server{per, team}, Tokens: store, Links: testLinks(t), Nonces: &MemoryNonces{}, Timeout: 20 * time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const redirect = "http://console.test/oauth/callback"

	if _, err := c.Start(ctx, redirect, "teamwide", "U1"); err == nil {
		t.Errorf("a person connecting a team-wide server: got no error")
	}
	if _, _, err := c.Finish(ctx, url.Values{"state": {"nope"}, "code": {"x"}}); !errors.Is(err, ErrNoFlow) {
		t.Errorf("callback without a flow: got %v, want ErrNoFlow", err)
	}
	authURL, err := c.Start(ctx, redirect, "hosted", "U1CAROL")
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := url.Parse(authURL); u.Query().Get("redirect_uri") != redirect {
		t.Errorf("got redirect_uri %q, want %q", u.Query().Get("redirect_uri"), redirect)
	}
	q := browse(t, authURL)
	server, principal, err := c.Finish(ctx, q)
	if err != nil || server != "hosted" || principal != "U1CAROL" {
		t.Fatalf("finish: got %s %s %v", server, principal, err)
	}
	if !c.Connected(ctx, "hosted", "U1CAROL") || c.Connected(ctx, "hosted", PrincipalTeam) {
		t.Errorf("want a grant for U1CAROL only")
	}
	// The same redirect again finds no flow: a code is taken once.
	if _, _, err := c.Finish(ctx, q); !errors.Is(err, ErrNoFlow) {
		t.Errorf("second callback: got %v, want ErrNoFlow", err)
	}
	if _, err := c.Disconnect(ctx, "hosted", "U1CAROL"); err != nil || c.Connected(ctx, "hosted", "U1CAROL") {
		t.Errorf("disconnect: %v (still connected: %v)", err, c.Connected(ctx, "hosted", "U1CAROL"))
	}
}

// TestConnectLinksFor: links are made only for a per-user server of the
// configuration, and point at the console's /oauth/connect.
func TestConnectLinksFor(t *testing.T) {
	t.Parallel()
	l := &ConnectLinks{Signer: testLinks(t), ConsoleURL: "https://console.example/", Servers: []mcpconfig.Server{
		{Name: "per", Type: mcpconfig.HTTP, OAuth: &mcpconfig.OAuth{Per: "user"}},
		{Name: "team", Type: mcpconfig.HTTP, OAuth: &mcpconfig.OAuth{Per: "team"}},
	}}
	link, err := l.Link("per", "U1")
	if err != nil || !strings.HasPrefix(link, "https://console.example/oauth/connect?t=") {
		t.Fatalf("got %q %v, want a console link", link, err)
	}
	u, _ := url.Parse(link)
	if got, err := l.Signer.Verify(u.Query().Get("t")); err != nil || got.Server != "per" || got.Principal != "U1" {
		t.Errorf("the link's token: got %+v %v, want per/U1", got, err)
	}
	for _, name := range []string{"team", "nope"} {
		if _, err := l.Link(name, "U1"); err == nil {
			t.Errorf("link for %s: got none, want an error", name)
		}
	}
}
