package tools

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// protectedServer is a go-sdk MCP server behind the SDK's bearer-token
// middleware, accepting no token; hits counts the requests it refused.
func protectedServer(t *testing.T) (url string, hits *atomic.Int64) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "protected", Version: "1"}, nil)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	verify := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
		return nil, auth.ErrInvalidToken
	}
	hits = new(atomic.Int64)
	var ts *httptest.Server
	mw := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: "http://example.invalid/.well-known/oauth-protected-resource/mcp",
		Scopes:              []string{"read", "write"},
	})
	inner := mw(h)
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp", hits
}

func TestBearerChallengeNeedsLogin(t *testing.T) {
	t.Parallel()
	url, hits := protectedServer(t)
	s := mcpconfig.Server{Name: "hosted", Type: mcpconfig.HTTP, URL: url}

	t.Run("probe", func(t *testing.T) {
		p := ProbeServer(t.Context(), Config{ConnectTimeout: 10 * time.Second}, s)
		if p.Status != ProbeNeedsLogin || !strings.Contains(p.Error, "relay mcp login hosted") {
			t.Errorf("got %s %q, want %s naming `relay mcp login hosted`", p.Status, p.Error, ProbeNeedsLogin)
		}
	})

	t.Run("runner", func(t *testing.T) {
		cfg := fastConfig(t, s)
		cfg.HealthInterval = 20 * time.Millisecond // many checks: none may count as a failure
		cfg.DisableAfter = 2
		var log recorder[Notice]
		cfg.Notify = log.notify
		r := startUnready(t, cfg)
		start := hits.Load()
		testenv.WaitFor(t, 30*time.Second, "five checks after the first", func() bool { return hits.Load() >= start+5 })
		st := r.Servers()[0]
		if st.State != StateNeedsLogin || st.Failures != 0 || !st.AutoDisabledAt.IsZero() {
			t.Errorf("got state %s, %d failures, auto-disabled at %v; want %s, 0, never", st.State, st.Failures, st.AutoDisabledAt, StateNeedsLogin)
		}
		if n := log.all(); len(n) != 1 || n[0].Kind != NoticeNeedsLogin || n[0].Server != "hosted" {
			t.Errorf("got notices %+v, want one %s notice", n, NoticeNeedsLogin)
		}
	})
}

func TestBearerChallenge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		ok       bool
		want     map[string]string
	}{
		{"sdk", `Bearer resource_metadata="https://a/.well-known/x", scope="read write"`, true,
			map[string]string{"resource_metadata": "https://a/.well-known/x", "scope": "read write"}},
		{"tokens", `bearer error=invalid_token,scope=read`, true, map[string]string{"error": "invalid_token", "scope": "read"}},
		{"escaped", `Bearer realm="a\"b"`, true, map[string]string{"realm": `a"b`}},
		{"bare", `Bearer`, true, map[string]string{}},
		{"basic", `Basic realm="x"`, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := bearerChallenge(tt.in)
			if ok != tt.ok || len(got) != len(tt.want) {
				t.Fatalf("got %v %v, want %v %v", got, ok, tt.want, tt.ok)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s: got %q, want %q", k, got[k], v)
				}
			}
		})
	}
	t.Run("plain 401", func(t *testing.T) {
		t.Parallel()
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no", http.StatusUnauthorized)
		}))
		t.Cleanup(ts.Close)
		s := mcpconfig.Server{Name: "plain", Type: mcpconfig.HTTP, URL: ts.URL}
		if p := ProbeServer(t.Context(), Config{ConnectTimeout: 10 * time.Second}, s); p.Status != ProbeUnhealthy {
			t.Errorf("without an oauth object: got %s, want %s", p.Status, ProbeUnhealthy)
		}
		s.OAuth = &mcpconfig.OAuth{}
		if p := ProbeServer(t.Context(), Config{ConnectTimeout: 10 * time.Second}, s); p.Status != ProbeNeedsLogin {
			t.Errorf("with an oauth object: got %s, want %s", p.Status, ProbeNeedsLogin)
		}
	})
	if !errors.Is(&NeedsLoginError{Server: "s"}, ErrNeedsLogin) {
		t.Error("NeedsLoginError is not ErrNeedsLogin")
	}
}
