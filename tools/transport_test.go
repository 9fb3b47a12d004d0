package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// holdConfig pings every 100ms, so a session held for a second and a half
// has passed more than a dozen health intervals.
func holdConfig(t *testing.T, s mcpconfig.Server) Config {
	cfg := fastConfig(t, s)
	cfg.HealthInterval = 100 * time.Millisecond
	cfg.Policy = policy(t, allowAll)
	return cfg
}

// holdSession checks that the server's one session stays up across
// several health intervals: no reconnect, no failed check, calls work.
func holdSession(t *testing.T, r *Runner, name string, hold time.Duration) {
	t.Helper()
	first := r.Servers()[0]
	start := time.Now()
	deadline := time.Now().Add(hold + 20*time.Second)
	for !r.Servers()[0].LastPing.After(start.Add(hold)) {
		if time.Now().After(deadline) {
			t.Fatalf("no ping after the hold of %s: %+v", hold, r.Servers()[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := r.Servers()[0]
	if !st.LastConnected.Equal(first.LastConnected) || st.State != StateReady || st.Failures != 0 {
		t.Fatalf("after %s: got state %s, %d failures, connected at %s (first %s, last error %q); want one session held",
			hold, st.State, st.Failures, st.LastConnected, first.LastConnected, st.LastError)
	}
	res := r.Call(t.Context(), Request{Tool: name + ".echo", Args: map[string]any{"message": "still here"}, Caller: Caller{Role: "agent"}})
	if res.Err != nil || res.Text != "Echo: still here" {
		t.Fatalf("call after the hold: got %q, %v", res.Text, res.Err)
	}
	t.Logf("%s: one session up %s across %s of %s health intervals (last ping %s)", name,
		time.Since(st.LastConnected).Round(time.Millisecond), hold, r.cfg.HealthInterval, st.PingLatency)
}

func TestSessionsHoldAcrossHealthIntervals(t *testing.T) {
	t.Parallel()
	hold := 1500 * time.Millisecond
	if v := os.Getenv("RELAY_TEST_HOLD"); v != "" { // a longer soak, for measuring uptime
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("RELAY_TEST_HOLD: %v", err)
		}
		hold = d
	}
	tests := []struct {
		name   string
		server func(t *testing.T) mcpconfig.Server
	}{
		{"stdio", func(t *testing.T) mcpconfig.Server { return everythingStdio(t, "stdio") }},
		{"sse", func(t *testing.T) mcpconfig.Server {
			return mcpconfig.Server{Name: "sse", Type: mcpconfig.SSE, URL: "http://" + startEverything(t, "sse") + "/sse",
				ProtocolVersion: mcpconfig.DefaultProtocolVersion}
		}},
		{"streamableHttp", func(t *testing.T) mcpconfig.Server {
			return mcpconfig.Server{Name: "streamableHttp", Type: mcpconfig.HTTP, URL: startEverythingHTTP(t),
				ProtocolVersion: mcpconfig.DefaultProtocolVersion}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := holdConfig(t, tt.server(t))
			if os.Getenv("RELAY_TEST_HOLD") != "" {
				cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
				cfg.SDKLogger = cfg.Logger
			}
			// A connect timeout shorter than the hold: the SSE stream must not
			// be tied to the handshake's context.
			cfg.ConnectTimeout = 10 * time.Second
			r := startRunner(t, cfg)
			holdSession(t, r, tt.name, hold)
		})
	}
}

// goServer is a go-sdk MCP server with an echo tool.
func goServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "relay-unix-test", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + in.Message}}}, nil, nil
		})
	return s
}

// serveUnix serves h on a fresh Unix socket and returns its path.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "relay-sock-") // short: socket paths are limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "mcp.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

func TestUnixSocketGoServer(t *testing.T) {
	t.Parallel()
	s := goServer()
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	mux.Handle("/sse", mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil))
	sock := serveUnix(t, mux)
	tests := []struct {
		name string
		typ  mcpconfig.Transport
		url  string
	}{
		{"http", mcpconfig.HTTP, "unix://" + sock + "#/mcp"},
		{"sse", mcpconfig.SSE, "unix://" + sock + "/sse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := startRunner(t, holdConfig(t, mcpconfig.Server{Name: tt.name, Type: tt.typ, URL: tt.url, ProtocolVersion: mcpconfig.DefaultProtocolVersion}))
			holdSession(t, r, tt.name, 500*time.Millisecond)
		})
	}
}

func TestPipeRefused(t *testing.T) {
	t.Parallel()
	p := ProbeServer(t.Context(), Config{}, mcpconfig.Server{Name: "p", Type: mcpconfig.HTTP, URL: "pipe:///mcp"})
	if p.OK || !strings.Contains(p.Error, "Windows named pipes are not supported on this platform") {
		t.Errorf("got %+v, want the named-pipe refusal", p)
	}
	if _, _, err := remoteEndpoint(nil, mcpconfig.Server{Name: "p", URL: "pipe:///mcp"}); !errors.Is(err, ErrPipeUnsupported) {
		t.Errorf("got %v, want ErrPipeUnsupported", err)
	}
}

func TestURLOnlyEntryAtSSEEndpointHints(t *testing.T) {
	t.Parallel()
	base := "http://" + startEverything(t, "sse")
	doc := `{"mcpServers": {"old": {"url": "` + base + `/sse"}}}`
	servers, err := mcpconfig.Parse([]byte(doc), mcpconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := ProbeServer(t.Context(), Config{ConnectTimeout: 10 * time.Second}, servers[0])
	if p.OK || !strings.Contains(p.Error, `set "type": "sse"`) {
		t.Fatalf("got %+v, want a hint to set \"type\": \"sse\"", p)
	}
	servers[0].Type = mcpconfig.SSE
	if p := ProbeServer(t.Context(), Config{ConnectTimeout: 10 * time.Second}, servers[0]); !p.OK {
		t.Fatalf("with type sse: got %+v", p)
	}
}

func TestFlappingServerIsAutoDisabled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	steer(t, dir, "exit-after-init", "")
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.HealthInterval = time.Hour // only the session's end triggers checks
	var log recorder[Notice]
	cfg.Notify = log.notify
	r := startUnready(t, cfg)
	// The notice is sent after the state changes: wait for it, not the state.
	testenv.WaitFor(t, 30*time.Second, "the auto-disable notice", func() bool { return len(log.all()) > 0 })
	st := r.Servers()[0]
	if st.State != StateDisabled {
		t.Errorf("state after the notice: got %s, want %s", st.State, StateDisabled)
	}
	if st.DisabledBy != "health" || !strings.Contains(st.DisabledReason, "3 failed health checks") || st.AutoDisabledAt.IsZero() {
		t.Errorf("got %+v, want auto-disabled after 3 failed checks", st)
	}
	if notices := log.all(); len(notices) != 1 || notices[0].Kind != NoticeAutoDisabled {
		t.Errorf("got notices %+v, want one auto-disable notice", notices)
	}
}

func TestToolNamesUpTo100Characters(t *testing.T) {
	t.Parallel()
	cfg := fastConfig(t, helperServer(t, "h", t.TempDir()))
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	names := map[string]bool{}
	for _, ti := range r.Tools(t.Context(), "agent") {
		names[ti.Tool] = true
	}
	if !names[strings.Repeat("n", 100)] || names[strings.Repeat("x", 101)] {
		t.Errorf("got tools %v, want the 100-character name and not the 101-character one", names)
	}
	res := r.Call(t.Context(), Request{Tool: "h." + strings.Repeat("n", 100), Caller: Caller{Role: "agent"}})
	if res.Err != nil || res.Text != "long" {
		t.Errorf("got %q, %v", res.Text, res.Err)
	}
}

// With the default retry settings and the specified 1s first health retry, a
// read-only call that crashed its stdio server waits for the restart (here
// 1.5s) and succeeds.
func TestReadOnlyRetryOutwaitsARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	steer(t, dir, "restart-delay-ms", "1500")
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.HealthBackoff, cfg.RetryBackoff, cfg.CallRetries = nil, 0, 0 // the defaults: 1s, 5s; 250ms; 2
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	res := r.Call(t.Context(), Request{Tool: "h.crash-once", Caller: Caller{Role: "agent"}})
	if res.Err != nil || res.Text != "survived" {
		t.Fatalf("got %q, %v after %s; want the retry to reach the restarted server", res.Text, res.Err, res.Duration)
	}
}

// A read-only call whose server is killed and does not come back reports the
// lost connection, not "server offline".
func TestKilledServerReportsTheLostConnection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.HealthBackoff = []time.Duration{time.Hour}
	cfg.RetryWindow = 2 * time.Second
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	pid := r.conns["h"].pid()
	done := make(chan *Result, 1)
	go func() {
		done <- r.Call(t.Context(), Request{Tool: "h.slow-read", Args: map[string]any{"ms": 30000}, Caller: Caller{Role: "agent"}})
	}()
	testenv.WaitFor(t, 10*time.Second, "the call to reach the server", func() bool { return fileExists(dir, "slow-read-started") })
	steer(t, dir, "refuse-start", "")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if !errors.Is(res.Err, ErrConnection) || errors.Is(res.Err, ErrOffline) || strings.Contains(res.Err.Error(), "server offline") {
		t.Fatalf("got %v, want the lost connection", res.Err)
	}
}

func TestServerMemory(t *testing.T) {
	t.Parallel()
	srv := mcpconfig.Server{Name: "memory", Type: mcpconfig.Stdio, Command: testenv.NPMBin(t, "mcp-server-memory"),
		Env: map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "memory.jsonl")}, ProtocolVersion: mcpconfig.DefaultProtocolVersion}
	cfg := fastConfig(t, srv)
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	c := Caller{Role: "agent"}
	res := r.Call(t.Context(), Request{Tool: "memory.create_entities", Caller: c, Args: map[string]any{"entities": []any{
		map[string]any{"name": "relay", "entityType": "project", "observations": []any{"runs MCP tools"}},
	}}})
	if res.Err != nil {
		t.Fatalf("create_entities: %v", res.Err)
	}
	res = r.Call(t.Context(), Request{Tool: "memory.search_nodes", Caller: c, Args: map[string]any{"query": "relay"}})
	if res.Err != nil || !strings.Contains(res.Text, "runs MCP tools") {
		t.Fatalf("search_nodes: got %q, %v", res.Text, res.Err)
	}
}

// cutGET ends the first standalone GET stream of a streamable HTTP session
// when cut is closed, telling the client (SSE retry) to come back after
// retry; it records every GET's Last-Event-ID and start time.
type cutGET struct {
	next  http.Handler
	cut   chan struct{}
	retry time.Duration

	mu     sync.Mutex
	gets   []time.Time
	ids    []string
	cutEnd time.Time
	// evented is set once the first GET stream carried an event with an id.
	evented bool
}

// idWatcher passes an SSE stream through and tells when an event with an id
// was written.
type idWatcher struct {
	http.ResponseWriter
	saw func()
}

func (w idWatcher) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	if bytes.HasPrefix(b, []byte("id:")) || bytes.Contains(b, []byte("\nid:")) {
		w.saw()
	}
	return n, err
}

func (w idWatcher) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

func (h *cutGET) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		h.next.ServeHTTP(w, r)
		return
	}
	h.mu.Lock()
	h.gets = append(h.gets, time.Now())
	h.ids = append(h.ids, r.Header.Get("Last-Event-ID"))
	first := len(h.gets) == 1
	h.mu.Unlock()
	if !first {
		h.next.ServeHTTP(w, r)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-h.cut:
			cancel()
		case <-ctx.Done():
		}
	}()
	h.next.ServeHTTP(idWatcher{w, func() { h.mu.Lock(); h.evented = true; h.mu.Unlock() }}, r.WithContext(ctx))
	fmt.Fprintf(w, "retry: %d\n\n", h.retry.Milliseconds())
	w.(http.Flusher).Flush()
	h.mu.Lock()
	h.cutEnd = time.Now()
	h.mu.Unlock()
}

// The standalone GET stream of a streamable HTTP session is resumed as the
// spec says: after the server's SSE retry delay, with Last-Event-ID, in the
// same session.
func TestStreamableHTTPResumesTheGETStream(t *testing.T) {
	t.Parallel()
	s := goServer()
	h := &cutGET{
		next: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
			&mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)}),
		cut:   make(chan struct{}),
		retry: 2500 * time.Millisecond, // the SDK's own first delay is 1s
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg := holdConfig(t, mcpconfig.Server{Name: "resume", Type: mcpconfig.HTTP, URL: srv.URL, ProtocolVersion: mcpconfig.DefaultProtocolVersion})
	r := startRunner(t, cfg)
	first := r.Servers()[0].LastConnected
	// An event with an id on the GET stream: tools/list_changed.
	mcp.AddTool(s, &mcp.Tool{Name: "late"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil, nil
	})
	testenv.WaitFor(t, 10*time.Second, "tools/list_changed over the GET stream", func() bool {
		for _, ti := range r.Tools(t.Context(), "agent") {
			if ti.Tool == "late" {
				return true
			}
		}
		return false
	})
	// The tool can show before the notification went out (a list fetched
	// meanwhile sees it; the server sends list_changed after a short delay):
	// cut only once the stream carried that event, so the reconnect has an
	// id to resume from.
	testenv.WaitFor(t, 10*time.Second, "an event with an id on the GET stream", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.evented
	})
	close(h.cut)
	testenv.WaitFor(t, 20*time.Second, "the client to reopen the GET stream", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.gets) >= 2
	})
	h.mu.Lock()
	id, gap := h.ids[1], h.gets[1].Sub(h.cutEnd)
	h.mu.Unlock()
	if id == "" {
		t.Errorf("the reconnect sent no Last-Event-ID")
	}
	if gap < h.retry-100*time.Millisecond {
		t.Errorf("reconnected %s after the cut, want the server's retry of %s honoured", gap, h.retry)
	}
	holdSession(t, r, "resume", 300*time.Millisecond)
	if st := r.Servers()[0]; !st.LastConnected.Equal(first) {
		t.Errorf("a new session was opened (%s, first %s); want the GET stream resumed in the same session", st.LastConnected, first)
	}
}

// TestStderrLineOfAnyLengthIsRead: one stderr line over 64 KB used to stop
// the reading (bufio.Scanner's limit), so the server blocked on a full pipe
// and later calls timed out. The long line is logged cut and the lines
// after it still arrive.
func TestStderrLineOfAnyLengthIsRead(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	done := make(chan struct{})
	go func() { logStderr(pr, log, slog.LevelInfo, nil); close(done) }()
	long := strings.Repeat("x", 200*1024)
	for _, line := range []string{"before\n", long + "\n", "after\r\n"} {
		if _, err := io.WriteString(pw, line); err != nil {
			t.Fatalf("write: %v (the pipe stalled)", err)
		}
	}
	pw.Close()
	<-done
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{"line=before", "line=after", fmt.Sprintf("cut_bytes=%d", len(long)-maxStderrLine)} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if len(out) > 3*maxStderrLine {
		t.Errorf("got %d bytes of log, want the long line cut to %d", len(out), maxStderrLine)
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestStdioBannerOnStdoutIsSkipped: a server that prints a banner and a log
// line on stdout before and between its JSON-RPC answers keeps its session,
// as with the TypeScript client; the skipped lines are logged as a warning.
func TestStdioBannerOnStdoutIsSkipped(t *testing.T) {
	t.Parallel()
	srv := everythingStdio(t, "banner")
	bin := srv.Command
	srv.Command = "sh"
	srv.Args = []string{"-c", `echo "MCP server v1.0 starting on stdio"; echo "[info] ready"; exec "$0" stdio`, bin}
	var buf bytes.Buffer
	var mu sync.Mutex
	cfg := fastConfig(t, srv)
	cfg.Policy = policy(t, allowAll)
	cfg.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	r := startRunner(t, cfg)
	res := r.Call(t.Context(), Request{Tool: "banner.echo", Args: map[string]any{"message": "hi"}, Caller: Caller{Role: "agent"}})
	if res.Err != nil || res.Text != "Echo: hi" {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("call: got %q, %v; want Echo: hi\n%s", res.Text, res.Err, buf.String())
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, "not JSON-RPC on stdout") || !strings.Contains(out, "MCP server v1.0 starting") {
		t.Errorf("log lacks the skipped-line warning:\n%s", out)
	}
}
