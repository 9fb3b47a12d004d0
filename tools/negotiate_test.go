package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// verServer is a go-sdk server speaking only versions, with an echo tool; it
// records the method and protocol version (_meta) of each request.
type verServer struct {
	mu      sync.Mutex
	seen    []string // "method@version"
	headers []string // "method Mcp-Method=… Mcp-Name=…" (SEP-2243)
}

func (g *verServer) server(versions ...string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "go-" + versions[0], Version: "1.0.0"},
		&mcp.ServerOptions{SupportedProtocolVersions: versions})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Annotations: readOnly},
		func(_ context.Context, _ *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
			return textResult("Echo: " + in.Message), nil, nil
		})
	return s
}

func (g *verServer) saw(entry string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Contains(g.seen, entry)
}

// record notes the JSON-RPC method and _meta protocol version of a POST.
func (g *verServer) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				Method string `json:"method"`
				Params struct {
					Meta map[string]any `json:"_meta"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &msg) == nil && msg.Method != "" {
				v, _ := msg.Params.Meta[metaProtocolVersion].(string)
				g.mu.Lock()
				g.seen = append(g.seen, msg.Method+"@"+v)
				g.headers = append(g.headers, msg.Method+" Mcp-Method="+r.Header.Get("Mcp-Method")+" Mcp-Name="+r.Header.Get("Mcp-Name"))
				g.mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	})
}

// streamable serves g's server speaking versions over streamable HTTP
// (stateless, as 2026-07-28 needs).
func (g *verServer) streamable(t *testing.T, stateless bool, versions ...string) string {
	return g.serve(t, g.server(versions...), stateless)
}

// serve serves s over streamable HTTP, recording requests.
func (g *verServer) serve(t *testing.T, s *mcp.Server, stateless bool) string {
	srv := httptest.NewServer(g.record(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: stateless})))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestNegotiationSideBySide runs servers of every supported version from
// one configuration: each is reached at its own version, automatically
// unless the entry pins one, and answers a tool call.
func TestNegotiationSideBySide(t *testing.T) {
	t.Parallel()
	g2026, g0618, g0326 := &verServer{}, &verServer{}, &verServer{}
	sse0326 := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return g0326.server("2025-03-26") }, nil))
	t.Cleanup(sse0326.Close)
	bin := everythingStdio(t, "x").Command
	// The same program twice: another spelling of its path, as an entry of
	// the same command and arguments would be disabled as a duplicate.
	bin2 := filepath.Dir(bin) + "/./" + filepath.Base(bin)
	// One mcp.json, as a user writes it: only pinned0618 and everythingsse
	// name a version.
	doc := fmt.Sprintf(`{"servers": {
		"new": {"type": "http", "url": %q},
		"everything": {"command": %q, "args": ["stdio"]},
		"old0618": {"type": "http", "url": %q},
		"pinned0618": {"command": %q, "args": ["stdio"], "protocolVersion": "2025-06-18"},
		"sse0326": {"type": "sse", "url": %q},
		"everythingsse": {"type": "sse", "url": %q, "protocolVersion": "2025-03-26"}}}`,
		g2026.streamable(t, true, "2026-07-28"), bin, g0618.streamable(t, false, "2025-06-18"), bin2, sse0326.URL,
		"http://"+startEverything(t, "sse")+"/sse")
	servers, err := mcpconfig.Parse([]byte(doc), mcpconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"new": "2026-07-28", "everything": "2025-11-25", "old0618": "2025-06-18",
		"pinned0618": "2025-06-18", "sse0326": "2025-03-26", "everythingsse": "2025-03-26"}
	r := startRunner(t, fastConfig(t, servers...))
	for _, st := range r.Servers() {
		if st.ProtocolVersion != want[st.Name] || st.State != StateReady {
			t.Errorf("%s: %s on %q, want ready on %s (%s)", st.Name, st.State, st.ProtocolVersion, want[st.Name], st.LastError)
		}
	}
	for _, tool := range []string{"new.echo", "old0618.echo", "sse0326.echo", "everything.echo", "pinned0618.echo", "everythingsse.echo"} {
		res := r.Call(t.Context(), Request{Tool: tool, Args: map[string]any{"message": "hi"}, Operator: true})
		if res.Err != nil || res.Text == "" {
			t.Errorf("%s: %q, %v", tool, res.Text, res.Err)
		}
	}
	// `relay mcp test` reports the same versions.
	for _, s := range servers {
		p := ProbeServer(t.Context(), fastConfig(t), s)
		if !p.OK || p.ProtocolVersion != want[s.Name] {
			t.Errorf("probe %s: %+v, want healthy on %s", s.Name, p, want[s.Name])
		}
	}
	// The 2026-07-28 server saw every request with its _meta, the probe's
	// ping too; 2025 servers got their pings without it.
	for _, m := range []string{"server/discover@2026-07-28", "tools/list@2026-07-28", "tools/call@2026-07-28", "ping@2026-07-28"} {
		if !g2026.saw(m) {
			t.Errorf("2026-07-28 server did not see %s: %v", m, g2026.seen)
		}
	}
	if !g0618.saw("initialize@") || !g0618.saw("ping@") {
		t.Errorf("2025-06-18 server saw %v", g0618.seen)
	}
}

// TestHealthPingAt20260728: the health loop's ping carries _meta, and the
// 2026-07-28 server's "method not found" for it keeps the server ready.
func TestHealthPingAt20260728(t *testing.T) {
	t.Parallel()
	g := &verServer{}
	r := startRunner(t, fastConfig(t, mcpconfig.Server{Name: "new", Type: mcpconfig.HTTP, URL: g.streamable(t, true, "2026-07-28")}))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		st := r.Servers()[0]
		if !st.LastPing.IsZero() && g.saw("ping@2026-07-28") {
			if st.State != StateReady || st.Failures != 0 {
				t.Fatalf("after a ping: %+v", st)
			}
			return
		}
		select {
		case <-ctx.Done():
			g.mu.Lock()
			t.Fatalf("no good health ping: %+v; server saw %v", st, g.seen)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestPinnedVersionMismatch: an entry pinning 2026-07-28 does not quietly
// fall back to the 2025 handshake.
func TestPinnedVersionMismatch(t *testing.T) {
	t.Parallel()
	s := everythingStdio(t, "pinned")
	s.ProtocolVersion = "2026-07-28"
	p := ProbeServer(t.Context(), fastConfig(t), s)
	if p.OK || p.ProtocolVersion != "" {
		t.Fatalf("got %+v, want a failed handshake", p)
	}
	r, err := New(fastConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // as ConnectTimeout bounds it in the runner
	defer cancel()
	_, _, err = dial(ctx, r, s, mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil), slog.New(slog.DiscardHandler))
	if !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("dial: %v, want ErrVersionMismatch", err)
	}
}

// TestStdioServerExitingOnDiscover: a stdio server that exits on
// server/discover is started again and reached with initialize.
func TestStdioServerExitingOnDiscover(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	helperDir(dir).mark("exit-on-discover")
	s := helperServer(t, "quits", dir)
	s.ProtocolVersion = ""
	r := startRunner(t, fastConfig(t, s))
	st := r.Servers()[0]
	if st.State != StateReady || st.ProtocolVersion != mcpconfig.DefaultProtocolVersion || !fileExists(dir, "discover-seen") {
		t.Fatalf("got %+v, want ready on %s after the server quit on discover", st, mcpconfig.DefaultProtocolVersion)
	}
	if res := r.Call(t.Context(), Request{Tool: "quits.echo", Args: map[string]any{"message": "x"}, Operator: true}); res.Err != nil {
		t.Fatal(res.Err)
	}
}

// TestTraceparentInMeta: a call made under a span carries its W3C
// traceparent in _meta, at 2026-07-28 and 2025 alike.
func TestTraceparentInMeta(t *testing.T) {
	t.Parallel()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	var servers []mcpconfig.Server
	for _, v := range []string{"2026-07-28", "2025-11-25"} {
		s := mcp.NewServer(&mcp.Implementation{Name: "tp", Version: "1.0.0"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{v}})
		mcp.AddTool(s, &mcp.Tool{Name: "tp"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			tp, _ := req.Params.Meta["traceparent"].(string)
			return textResult(tp), nil, nil
		})
		servers = append(servers, mcpconfig.Server{Name: "v" + v[:4], Type: mcpconfig.HTTP, URL: (&verServer{}).serve(t, s, v == "2026-07-28")})
	}
	r := startRunner(t, fastConfig(t, servers...))
	for _, s := range servers {
		res := r.Call(ctx, Request{Tool: s.Name + ".tp", Operator: true})
		if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; res.Err != nil || res.Text != want {
			t.Errorf("%s: got %q, %v; want %s", s.Name, res.Text, res.Err, want)
		}
	}
}

// TestToolsCarryTheServersTTL: a server's tools/list ttlMs (SEP-2549) is on
// each of its tools (ToolInfo.ServerTTLMs), for the holders of lists (the
// hooks' discovery cache); a server that gives none leaves it 0.
func TestToolsCarryTheServersTTL(t *testing.T) {
	t.Parallel()
	g, plain := &verServer{}, &verServer{}
	s := g.server("2026-07-28")
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if lt, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				lt.TTLMs = 1234
			}
			return res, err
		}
	})
	r := startRunner(t, fastConfig(t,
		mcpconfig.Server{Name: "ttl", Type: mcpconfig.HTTP, URL: g.serve(t, s, true)},
		mcpconfig.Server{Name: "plain", Type: mcpconfig.HTTP, URL: plain.streamable(t, true, "2026-07-28")}))
	for _, server := range []string{"ttl", "plain"} {
		list, err := r.AllTools(t.Context(), server)
		if err != nil || len(list) != 1 {
			t.Fatalf("%s: tools %+v, %v", server, list, err)
		}
		want := map[string]int64{"ttl": 1234, "plain": 0}[server]
		if got := list[0].ServerTTLMs; got != want {
			t.Errorf("%s: ServerTTLMs %d, want %d", server, got, want)
		}
	}
}
