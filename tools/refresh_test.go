package tools

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// versionedServer is a stateless streamable-HTTP MCP server whose tool list
// is the names in *names at each request. Stateless, it sends no
// notifications/tools/list_changed: only the cache's TTL, a reload or a
// refresh makes a client see a change.
func versionedServer(t *testing.T, name string, names *atomic.Pointer[[]string]) mcpconfig.Server {
	t.Helper()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "versioned", Version: "1.0.0"}, nil)
		for _, n := range *names.Load() {
			mcp.AddTool(s, &mcp.Tool{Name: n, Annotations: readOnly}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return textResult(n), nil, nil
			})
		}
		return s
	}, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return mcpconfig.Server{Name: name, Type: mcpconfig.HTTP, URL: srv.URL, ProtocolVersion: mcpconfig.DefaultProtocolVersion}
}

func toolNames(t *testing.T, r *Runner) []string {
	t.Helper()
	var out []string
	for _, i := range r.Tools(t.Context(), "agent") {
		out = append(out, i.Name)
	}
	slices.Sort(out)
	return out
}

// TestRefreshTools: a server's changed tool list is seen after RefreshTools
// (one server or all) and after a reload, not before (the TTL is 5 minutes);
// an entry's ttlMs makes the cache expire on its own.
func TestRefreshTools(t *testing.T) {
	t.Parallel()
	var aNames, bNames, cNames atomic.Pointer[[]string]
	aNames.Store(&[]string{"one"})
	bNames.Store(&[]string{"uno"})
	cNames.Store(&[]string{"eins"})
	short := versionedServer(t, "c", &cNames)
	short.ToolsTTL = time.Second
	cfg := fastConfig(t, versionedServer(t, "a", &aNames), versionedServer(t, "b", &bNames), short)
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	if got, want := toolNames(t, r), []string{"a.one", "b.uno", "c.eins"}; !slices.Equal(got, want) {
		t.Fatalf("tools: got %v, want %v", got, want)
	}

	aNames.Store(&[]string{"one", "two"})
	bNames.Store(&[]string{"dos"})
	cNames.Store(&[]string{"zwei"})
	if got, want := toolNames(t, r), []string{"a.one", "b.uno", "c.eins"}; !slices.Equal(got, want) {
		t.Fatalf("tools before a refresh (cached): got %v, want %v", got, want)
	}
	// ttlMs 1000: c's list expires by itself, a's and b's do not.
	testenv.WaitFor(t, 10*time.Second, "c's tool list to expire after its ttlMs", func() bool {
		return slices.Contains(toolNames(t, r), "c.zwei")
	})
	if got := toolNames(t, r); !slices.Contains(got, "b.uno") || slices.Contains(got, "a.two") {
		t.Fatalf("a and b expired with c's ttlMs: got %v", got)
	}

	names, err := r.RefreshTools("a")
	if err != nil || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("RefreshTools(a): got %v, %v; want [a]", names, err)
	}
	if got, want := toolNames(t, r), []string{"a.one", "a.two", "b.uno", "c.zwei"}; !slices.Equal(got, want) {
		t.Fatalf("tools after refreshing a: got %v, want %v", got, want)
	}
	names, err = r.RefreshTools("")
	if err != nil || !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("RefreshTools(\"\"): got %v, %v; want [a b c]", names, err)
	}
	if got, want := toolNames(t, r), []string{"a.one", "a.two", "b.dos", "c.zwei"}; !slices.Equal(got, want) {
		t.Fatalf("tools after refreshing all: got %v, want %v", got, want)
	}
	if _, err := r.RefreshTools("nosuch"); !errors.Is(err, ErrUnknownServer) {
		t.Errorf("RefreshTools(nosuch): got %v, want ErrUnknownServer", err)
	}

	// A reload that changes nothing keeps the sessions but drops the lists.
	aNames.Store(&[]string{"three"})
	if res := r.Reload(cfg.Servers); res.Changed() {
		t.Fatalf("reload of the same servers changed %+v", res)
	}
	if got := toolNames(t, r); !slices.Contains(got, "a.three") || slices.Contains(got, "a.one") {
		t.Fatalf("tools after a reload: got %v, want a.three only for a", got)
	}
}

// TestRefreshWithoutRunner: with no tool runner but a listener on
// rpc.tool.refresh that never answers (a hooks worker, the agent), a refresh
// fails at once with ErrNoRunner instead of waiting out its timeout.
func TestRefreshWithoutRunner(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	hooks := bustest.Connect(t, b).Conn()
	if _, err := hooks.Subscribe(b.Subject(SubjectRefresh), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := hooks.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := RefreshRemote(t.Context(), b.Conn(), b.Prefix(), "")
	if took := time.Since(start); !errors.Is(err, ErrNoRunner) || took > remoteTimeout/2 {
		t.Fatalf("got %v after %v, want ErrNoRunner at once", err, took)
	}
}

// TestToolsListedIsWhenTheServerListed: a server's status says when its tool
// list was discovered (the hooks specification's lastDiscovered): the time of
// that list while it is served and after a refresh drops it, and the time of
// the next list once there is one.
func TestToolsListedIsWhenTheServerListed(t *testing.T) {
	t.Parallel()
	var names atomic.Pointer[[]string]
	names.Store(&[]string{"one"})
	cfg := fastConfig(t, versionedServer(t, "a", &names))
	cfg.Policy = policy(t, allowAll)
	before := time.Now()
	r := startRunner(t, cfg)
	listed := func() time.Time {
		t.Helper()
		st := r.Servers()
		if len(st) != 1 {
			t.Fatalf("got %d servers, want 1", len(st))
		}
		return st[0].ToolsListed
	}
	if got := toolNames(t, r); !slices.Equal(got, []string{"a.one"}) {
		t.Fatalf("tools: %v", got)
	}
	first := listed()
	if first.Before(before) || first.After(time.Now()) {
		t.Fatalf("tools listed at %v, want between %v and now", first, before)
	}
	if got := listed(); !got.Equal(first) {
		t.Errorf("a status later says %v, want %v: nothing was listed since", got, first)
	}
	if _, err := r.RefreshTools("a"); err != nil {
		t.Fatal(err)
	}
	if got := listed(); !got.Equal(first) {
		t.Errorf("after a refresh, before the next list: %v, want %v (the list shown is that one)", got, first)
	}
	names.Store(&[]string{"one", "two"})
	if got := toolNames(t, r); !slices.Equal(got, []string{"a.one", "a.two"}) {
		t.Fatalf("tools after the refresh: %v", got)
	}
	if got := listed(); !got.After(first) {
		t.Errorf("after the next list: %v, want later than %v", got, first)
	}
}
