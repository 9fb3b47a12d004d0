package toolrunner

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/oauthtest"
	"github.com/relaystation/relay/tools/toolstest"
)

// TestTokensSharedOnTheBus: one login stored in the token bucket serves
// two tool runner processes (each its own bus connection); when one
// refreshes a rotating refresh token, the other adopts the stored grant
// instead of spending the old one, and both keep calling. The bucket holds
// no token in clear.
func TestTokensSharedOnTheBus(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	sealer, err := tools.NewSealer(secret.New("bus-test-secret-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	srv := oauthtest.Start(t, oauthtest.Options{})
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: srv.MCP, ProtocolVersion: mcpconfig.DefaultProtocolVersion}

	cliTokens, err := OpenTokens(t.Context(), bustest.Connect(t, b), sealer)
	if err != nil {
		t.Fatal(err)
	}
	l := &tools.Login{Open: oauthtest.FollowRedirect, Out: io.Discard}
	defer l.Close()
	if err := tools.LoginServer(t.Context(), tools.Config{OAuth: &tools.OAuthConfig{Tokens: cliTokens, Login: l}}, s); err != nil {
		t.Fatalf("login: %v", err)
	}

	var runners []*tools.Runner
	for range 2 {
		kv, err := OpenTokens(t.Context(), bustest.Connect(t, b), sealer)
		if err != nil {
			t.Fatal(err)
		}
		runners = append(runners, toolstest.StartReady(t, tools.Config{Servers: []mcpconfig.Server{s},
			OAuth: &tools.OAuthConfig{Tokens: kv}, HealthInterval: time.Minute}))
	}
	call := func(r *tools.Runner) {
		t.Helper()
		res := r.Call(t.Context(), tools.Request{Tool: "hosted.whoami", Args: map[string]any{}, Operator: true})
		if res.Err != nil || !strings.Contains(fmt.Sprint(res.Content), "user:alice") {
			t.Fatalf("got %v %v, want user:alice", res.Content, res.Err)
		}
	}
	for _, r := range runners {
		call(r)
	}
	if srv.Logins.Load() != 1 {
		t.Errorf("got %d logins, want 1 shared", srv.Logins.Load())
	}

	srv.ExpireAccess()
	call(runners[0]) // refreshes; the old refresh token is spent (rotation)
	call(runners[1]) // must adopt the stored grant, not refresh with the spent one
	if got := srv.Refreshes.Load(); got != 1 {
		t.Errorf("got %d refreshes, want 1", got)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	g, _, err := cliTokens.Load(ctx, "hosted", tools.PrincipalTeam)
	if err != nil {
		t.Fatal(err)
	}
	e, err := cliTokens.kv.Get(ctx, tools.GrantKey("hosted", g.Issuer, tools.PrincipalTeam))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(e.Value()), g.AccessToken) || strings.Contains(string(e.Value()), g.RefreshToken) {
		t.Error("the bucket holds a token in clear")
	}
}
