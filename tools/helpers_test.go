package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// The test binary doubles as an in-process SDK MCP server over stdio: with
// RELAY_TEST_MCP_SERVER set, TestMain serves instead of testing. The server
// has tools for crashes, slowness, flakiness and bad output; marker files in
// RELAY_TEST_DIR let tests see what happened inside it.
const helperEnv = "RELAY_TEST_MCP_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(serveHelper())
	}
	os.Exit(m.Run())
}

type msgIn struct {
	Message string `json:"message"`
}

type slowIn struct {
	MS int `json:"ms"`
}

type weather struct {
	Temperature float64 `json:"temperature"`
}

// serveHelper runs this test binary as a stdio MCP server whose behaviour
// the test steers through marker files in RELAY_TEST_DIR.
func serveHelper() int {
	h := helperDir(os.Getenv("RELAY_TEST_DIR"))
	if h.exists("refuse-start") {
		fmt.Fprintln(os.Stderr, "helper: refusing to start")
		return 3
	}
	if b, err := os.ReadFile(filepath.Join(string(h), "restart-delay-ms")); err == nil && h.exists("crashed") {
		// A restart after the crash takes this long, as a real server's might.
		ms, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	var opts *mcp.ServerOptions
	if h.exists("exit-after-init") {
		// A flapping server: it completes the handshake, then goes away.
		opts = &mcp.ServerOptions{InitializedHandler: func(context.Context, *mcp.InitializedRequest) { os.Exit(0) }}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "relay-test-helper", Version: "1.0.0"}, opts)
	if h.exists("exit-on-discover") {
		// A server that ends the session on a method it does not know, as
		// some 2025 stdio servers do with server/discover.
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "server/discover" {
					h.mark("discover-seen")
					os.Exit(0)
				}
				return next(ctx, method, req)
			}
		})
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echoes", Annotations: readOnly},
		func(_ context.Context, _ *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
			return textResult("Echo: " + in.Message), nil, nil
		})
	h.addSlowTools(s)
	h.addFaultyTools(s)
	if h.exists("die-tool") {
		// die says why on stderr and exits in the middle of its call.
		mcp.AddTool(s, &mcp.Tool{Name: "die"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			fmt.Fprintln(os.Stderr, "helper: out of memory in worker 3, token ghp_abcdefghijklmnopqrstuvwxyz0123456789")
			os.Exit(9)
			return nil, nil, nil
		})
	}
	addNamedTools(s)
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil && !errors.Is(err, context.Canceled) {
		return 1
	}
	return 0
}

// readOnly annotates the helper's tools the runner may retry.
var readOnly = &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}

// textResult is a tool result of one text.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// helperDir is the folder of the marker files the helper server reads and
// writes: the test steers it and watches what it did there.
type helperDir string

func (d helperDir) mark(name string) {
	_ = os.WriteFile(filepath.Join(string(d), name), []byte("1"), 0o600)
}

func (d helperDir) exists(name string) bool {
	_, err := os.Stat(filepath.Join(string(d), name))
	return err == nil
}

// addSlowTools adds slow, which has side effects (no annotations) and must
// never be retried, and slow-read, slow but read-only, which the runner may
// retry. Both mark when they start, and slow marks how it ended.
func (d helperDir) addSlowTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "waits ms milliseconds"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
			d.mark("slow-started")
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				d.mark("slow-done")
				return textResult("done"), nil, nil
			case <-ctx.Done():
				d.mark("slow-cancelled")
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow-read", Annotations: readOnly},
		func(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
			d.mark("slow-read-started")
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				return textResult("read"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
}

// addFaultyTools adds the tools that crash, fail or answer what their
// schema forbids.
func (d helperDir) addFaultyTools(s *mcp.Server) {
	// crash-once kills the server on its first call ever, then works; it is
	// idempotent, so the runner may retry it.
	mcp.AddTool(s, &mcp.Tool{Name: "crash-once", Annotations: readOnly},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			if !d.exists("crashed") {
				d.mark("crashed")
				os.Exit(7)
			}
			return textResult("survived"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "always reports an error"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			res := textResult("it broke, token ghp_abcdefghijklmnopqrstuvwxyz0123456789")
			res.IsError = true
			return res, nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "bad-output", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"temperature":{"type":"number"}},"required":["temperature"]}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res := textResult("{}")
			res.StructuredContent = map[string]any{"temperature": "hot"}
			return res, nil
		})
}

// addNamedTools adds the tools that test names: one of the longest name
// allowed, one longer, and add-tool, which adds a tool while the server runs.
func addNamedTools(s *mcp.Server) {
	// Names up to 100 characters are fine; longer ones are not offered.
	mcp.AddTool(s, &mcp.Tool{Name: strings.Repeat("n", 100), Annotations: readOnly}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return textResult("long"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: strings.Repeat("x", 101), Annotations: readOnly}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return textResult("too long"), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "add-tool", Description: "adds tool 'added'"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: "added", Annotations: readOnly}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, weather, error) {
				return nil, weather{Temperature: 21}, nil
			})
			return textResult("added"), nil, nil
		})
}

// helperServer is an mcp.json entry that runs this test binary as a server.
func helperServer(t *testing.T, name, dir string) mcpconfig.Server {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mcpconfig.Server{
		Name: name, Type: mcpconfig.Stdio, Command: exe, Args: []string{"-test.run=^$"},
		Env:             map[string]string{helperEnv: "1", "RELAY_TEST_DIR": dir},
		ProtocolVersion: mcpconfig.DefaultProtocolVersion,
	}
}

func everythingStdio(t testing.TB, name string) mcpconfig.Server {
	return mcpconfig.Server{Name: name, Type: mcpconfig.Stdio, Command: testenv.NPMBin(t, "mcp-server-everything"), Args: []string{"stdio"},
		ProtocolVersion: mcpconfig.DefaultProtocolVersion}
}

// startEverythingHTTP starts `mcp-server-everything streamableHttp` on a free
// port (it reads PORT) and returns its /mcp URL.
func startEverythingHTTP(t *testing.T) string {
	t.Helper()
	return "http://" + startEverything(t, "streamableHttp") + "/mcp"
}

// startEverything starts `mcp-server-everything <mode>` on a free port and
// returns its host:port (testenv.Everything).
func startEverything(t *testing.T, mode string) string {
	t.Helper()
	return testenv.Everything(t, mode)
}

func fileExists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

// fastConfig is a runner configuration whose health checks and retries run
// in milliseconds.
func fastConfig(t *testing.T, servers ...mcpconfig.Server) Config {
	return Config{
		Servers:        servers,
		AuditPath:      filepath.Join(t.TempDir(), "audit", "tools.jsonl"),
		BaseEnv:        BaseEnvFrom(os.Environ()),
		HealthInterval: 200 * time.Millisecond,
		HealthBackoff:  []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond},
		PingTimeout:    2 * time.Second,
		ConnectTimeout: 20 * time.Second,
		BreakerOpen:    time.Minute,
		RetryBackoff:   50 * time.Millisecond,
	}
}

// startRunner builds and starts a runner and waits for its servers.
func startRunner(t testing.TB, cfg Config) *Runner {
	t.Helper()
	r := startUnready(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if pending := r.WaitReady(ctx); len(pending) > 0 {
		t.Fatalf("servers not ready: %v (%+v)", pending, r.Servers())
	}
	return r
}

// startUnready starts a runner without waiting for its servers, closed when
// the test ends.
func startUnready(t testing.TB, cfg Config) *Runner {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return r
}

// steer writes the marker file name, with content, that steers the helper
// server running in dir (see serveHelper).
func steer(t *testing.T, dir, name, content string) {
	t.Helper()
	testenv.WriteFile(t, filepath.Join(dir, name), content)
}

// recorder collects what a callback of the runner receives (notices,
// questions, sampling requests); safe for concurrent use.
type recorder[T any] struct {
	mu   sync.Mutex
	list []T
}

func (r *recorder[T]) add(x T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, x)
}

// all answers a copy of what it has recorded so far.
func (r *recorder[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list)
}

// notify records a notice, as Config.Notify.
func (r *recorder[T]) notify(_ context.Context, n T) { r.add(n) }

// readAudit returns the records of r's audit log, flushed first.
func readAudit(t *testing.T, r *Runner) []Record {
	t.Helper()
	if err := r.audit.Flush(); err != nil {
		t.Fatalf("flush the audit log: %v", err)
	}
	b, err := os.ReadFile(r.cfg.AuditPath)
	if err != nil {
		t.Fatalf("read audit log: %v", err)
	}
	var out []Record
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func policy(t testing.TB, yml string) *mcpconfig.Policy {
	t.Helper()
	p, err := mcpconfig.ParsePolicy([]byte(yml))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p
}
