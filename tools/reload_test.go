package tools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

func TestReloadAddsRemovesRestarts(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := helperServer(t, "a", dirA), helperServer(t, "b", dirB)
	r := startRunner(t, fastConfig(t, a))
	call := func(tool string, args map[string]any) *Result {
		return r.Call(t.Context(), Request{Tool: tool, Args: args, Operator: true})
	}
	pidA := r.conn("a").pid()

	// A call in flight on a when a is removed finishes on a.
	slow := make(chan *Result, 1)
	go func() { slow <- call("a.slow", map[string]any{"ms": 700}) }()
	testenv.WaitFor(t, 10*time.Second, "slow call started", func() bool { return fileExists(dirA, "slow-started") })

	res := r.Reload([]mcpconfig.Server{b})
	if fmt.Sprint(res.Added, res.Removed, res.Restarted) != "[b] [a] []" {
		t.Fatalf("Reload = %+v, want b added and a removed", res)
	}
	if got := call("a.echo", map[string]any{"message": "x"}); !errors.Is(got.Err, ErrUnknownServer) {
		t.Errorf("a.echo after removal: %v, want ErrUnknownServer", got.Err)
	}
	if got := <-slow; got.Err != nil || fileExists(dirA, "slow-cancelled") {
		t.Errorf("call in flight on the removed server: %v, want it finished", got.Err)
	}
	testenv.WaitFor(t, 10*time.Second, "removed server's process to exit", func() bool {
		return syscall.Kill(pidA, 0) != nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if pending := r.WaitReady(ctx); len(pending) > 0 {
		t.Fatalf("not ready after reload: %v", pending)
	}
	if got := call("b.echo", map[string]any{"message": "new"}); got.Err != nil {
		t.Fatalf("b.echo: %v", got.Err)
	}
	pidB := r.conn("b").pid()

	// The same configuration again changes nothing: b keeps its process.
	if res := r.Reload([]mcpconfig.Server{b}); res.Changed() || r.conn("b").pid() != pidB {
		t.Errorf("unchanged reload: %+v, pid %d, want %d", res, r.conn("b").pid(), pidB)
	}

	// A changed entry restarts the server with an empty tool cache.
	b2 := b
	b2.Env = map[string]string{helperEnv: "1", "RELAY_TEST_DIR": dirB, "EXTRA": "1"}
	if res := r.Reload([]mcpconfig.Server{b2}); fmt.Sprint(res.Restarted) != "[b]" {
		t.Fatalf("Reload = %+v, want b restarted", res)
	}
	if pending := r.WaitReady(ctx); len(pending) > 0 {
		t.Fatalf("not ready after restart: %v", pending)
	}
	if got := call("b.echo", map[string]any{"message": "again"}); got.Err != nil {
		t.Fatalf("b.echo after restart: %v", got.Err)
	}
	if p := r.conn("b").pid(); p == pidB || p == 0 {
		t.Errorf("b's pid %d after restart, want a new process (was %d)", p, pidB)
	}
	testenv.WaitFor(t, 10*time.Second, "old b process to exit", func() bool { return syscall.Kill(pidB, 0) != nil })
	if st := r.Servers(); len(st) != 1 || st[0].Name != "b" {
		t.Errorf("status lists %v, want only b", st)
	}
}

// A call in flight when a Reload restarts its server is counted on the
// connection that ran it, not on the one that replaced it.
func TestReloadCountsCallOnItsConnection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := helperServer(t, "b", dir)
	r := startRunner(t, fastConfig(t, b))
	slow := make(chan *Result, 1)
	go func() {
		slow <- r.Call(t.Context(), Request{Tool: "b.slow", Args: map[string]any{"ms": 500}, Operator: true})
	}()
	testenv.WaitFor(t, 10*time.Second, "slow call started", func() bool { return fileExists(dir, "slow-started") })

	b2 := b
	b2.Env = map[string]string{helperEnv: "1", "RELAY_TEST_DIR": dir, "EXTRA": "1"}
	if res := r.Reload([]mcpconfig.Server{b2}); fmt.Sprint(res.Restarted) != "[b]" {
		t.Fatalf("Reload = %+v, want b restarted", res)
	}
	if got := <-slow; got.Err != nil {
		t.Fatalf("call in flight on the restarted server: %v, want it finished", got.Err)
	}
	invocations := func() int64 {
		st := r.Servers()
		if len(st) != 1 {
			t.Fatalf("status lists %d servers, want b only", len(st))
		}
		return st[0].Invocations
	}
	if n := invocations(); n != 0 {
		t.Errorf("restarted b counts %d invocations before its first call, want 0 (the slow call ran on the old connection)", n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if pending := r.WaitReady(ctx); len(pending) > 0 {
		t.Fatalf("not ready after restart: %v", pending)
	}
	if got := r.Call(t.Context(), Request{Tool: "b.echo", Args: map[string]any{"message": "x"}, Operator: true}); got.Err != nil {
		t.Fatalf("b.echo: %v", got.Err)
	}
	if n := invocations(); n != 1 {
		t.Errorf("restarted b counts %d invocations after one call, want 1", n)
	}
}

// A server an operator disabled stays disabled when a reload restarts it
// (its entry changed) or adds it again: the persisted state applies to the
// servers of a reloaded mcp.json as it does at startup.
func TestReloadKeepsOperatorState(t *testing.T) {
	t.Parallel()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, b := helperServer(t, "a", dirA), helperServer(t, "b", dirB)
	cfg := fastConfig(t, a, b)
	st := NewMemoryState()
	cfg.State = st
	r := startRunner(t, cfg)
	if err := r.Disable(t.Context(), "a", "broken upstream"); err != nil {
		t.Fatal(err)
	}

	a2 := a
	a2.Env = map[string]string{helperEnv: "1", "RELAY_TEST_DIR": dirA, "EXTRA": "1"}
	if res := r.Reload([]mcpconfig.Server{a2, b}); fmt.Sprint(res.Restarted) != "[a]" {
		t.Fatalf("Reload = %+v, want a restarted", res)
	}
	for _, s := range r.Servers() {
		if s.Name == "a" && (s.State != StateDisabled || s.DisabledReason != "broken upstream") {
			t.Errorf("a after a reload that changed it: state %s (%q), want disabled (broken upstream)", s.State, s.DisabledReason)
		}
	}
	if got := r.Call(t.Context(), Request{Tool: "a.echo", Args: map[string]any{"message": "x"}, Operator: true}); got.Status != StatusDisabled {
		t.Errorf("call on a: got %s (%v), want disabled", got.Status, got.Err)
	}

	// Removed and added again: still disabled.
	r.Reload([]mcpconfig.Server{b})
	if res := r.Reload([]mcpconfig.Server{a2, b}); fmt.Sprint(res.Added) != "[a]" {
		t.Fatalf("Reload = %+v, want a added", res)
	}
	if s := r.Servers()[0]; s.Name != "a" || s.State != StateDisabled {
		t.Errorf("a added again: got %s %s, want a disabled", s.Name, s.State)
	}

	// Enabled by the operator, it runs again.
	if err := r.Enable(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if pending := r.WaitReady(ctx); len(pending) > 0 {
		t.Fatalf("not ready after enable: %v", pending)
	}
}

// The policy's bindings are checked against the servers at start; a reload
// that drops a bound server is applied, with a warning naming the binding.
func TestReloadWarnsOfBindingWithoutServer(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	a := mcpconfig.Server{Name: "a", Type: mcpconfig.Stdio, Command: "x"}
	b := mcpconfig.Server{Name: "b", Type: mcpconfig.Stdio, Command: "y"}
	r, err := New(Config{
		Servers: []mcpconfig.Server{a, b},
		Policy:  policy(t, "bindings:\n  - slack: {channel: C0OPS}\n    servers: [b]\n"),
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	r.Reload([]mcpconfig.Server{a, b})
	if strings.Contains(logs.String(), "bindings") {
		t.Errorf("reload keeping b: got log %q, want no binding warning", logs.String())
	}
	r.Reload([]mcpconfig.Server{a})
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, `bindings[0].servers: server \"b\" is not in mcp.json`) {
		t.Errorf("reload dropping b: got log %q, want a warning naming bindings[0] and b", got)
	}
}
