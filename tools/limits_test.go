package tools

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/internal/testenv"
)

// TestSessionLimitPerThread: limits.perSession counts the executions of a
// thread; a full thread refuses with limit_exceeded, another thread runs.
func TestSessionLimitPerThread(t *testing.T) {
	t.Parallel()
	cfg := fastConfig(t, helperServer(t, "h", t.TempDir()))
	cfg.Policy = policy(t, allowAll+"limits: {perSession: 2}\n")
	r := startRunner(t, cfg)
	call := func(thread string) *Result {
		return r.Call(t.Context(), Request{Tool: "h.echo", Args: map[string]any{"message": "x"}, Thread: thread, Caller: Caller{Role: "agent"}})
	}
	steps := []struct {
		thread string
		want   Status
	}{{"slack:T1/C1/1.0", StatusSuccess}, {"slack:T1/C1/1.0", StatusSuccess}, {"slack:T1/C1/1.0", StatusLimitExceeded},
		{"slack:T1/C1/2.0", StatusSuccess}, {"", StatusSuccess}, {"", StatusSuccess}, {"", StatusSuccess}}
	for i, s := range steps {
		res := call(s.thread)
		if res.Status != s.want {
			t.Errorf("call %d in thread %q: got %s (%v), want %s", i+1, s.thread, res.Status, res.Err, s.want)
		}
		if s.want == StatusLimitExceeded && !errors.Is(res.Err, ErrLimitExceeded) {
			t.Errorf("call %d: got %v, want ErrLimitExceeded", i+1, res.Err)
		}
	}
	recs := readAudit(t, r)
	if len(recs) != len(steps) || recs[2].Status != StatusLimitExceeded {
		t.Fatalf("audit: got %+v, want %d records, the third limit_exceeded", recs, len(steps))
	}
	for _, rec := range recs {
		if uuid.Validate(rec.ID) != nil || uuid.Validate(rec.ExecutionID) != nil || rec.RunID != rec.ExecutionID {
			t.Errorf("record %+v: want UUID id and execution id, run id defaulting to the execution id", rec)
		}
	}
}

// TestCancelExecution: Cancel ends a running call with status cancelled;
// the server receives notifications/cancelled (the SDK server's handler
// context ends) and the audit record names who cancelled.
func TestCancelExecution(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	if r.Cancel("nothing-runs", "alice") {
		t.Fatal("cancelled an execution that does not exist")
	}
	done := make(chan *Result, 1)
	go func() {
		done <- r.Call(t.Context(), Request{CallID: "call-slow", Tool: "h.slow", Args: map[string]any{"ms": 20000},
			Thread: "github:o/r#1", Actor: "octocat", Caller: Caller{Role: "agent"}})
	}()
	testenv.WaitFor(t, 10*time.Second, "slow-started", func() bool { return fileExists(dir, "slow-started") })
	active, err := r.Active(t.Context())
	if err != nil || len(active) != 1 {
		t.Fatalf("active: got %+v, %v; want the slow call", active, err)
	}
	if e := active[0]; e.ID != "call-slow" || e.Server != "h" || e.Tool != "slow" || e.Thread != "github:o/r#1" || e.Actor != "octocat" || e.Owner != r.ID() || e.Started.IsZero() {
		t.Errorf("active execution: got %+v", e)
	}
	if !r.Cancel("call-slow", "alice") {
		t.Fatal("Cancel: the running call was not found")
	}
	res := <-done
	if res.Status != StatusCancelled || !errors.Is(res.Err, ErrCancelled) || res.CancelledBy != "alice" || res.ExecutionID != "call-slow" {
		t.Fatalf("got %s, %v, by %q; want cancelled by alice", res.Status, res.Err, res.CancelledBy)
	}
	if want := "execution call-slow cancelled by alice"; !strings.Contains(res.Err.Error(), want) {
		t.Errorf("error: got %q, want it to say %q", res.Err, want)
	}
	testenv.WaitFor(t, 10*time.Second, "the server to see notifications/cancelled", func() bool { return fileExists(dir, "slow-cancelled") })
	if active, _ := r.Active(context.Background()); len(active) != 0 {
		t.Errorf("active after the cancel: got %+v, want none", active)
	}
	recs := readAudit(t, r)
	if len(recs) != 1 || recs[0].Status != StatusCancelled || recs[0].CancelledBy != "alice" || recs[0].Actor != "octocat" || recs[0].ExecutionID != "call-slow" ||
		!strings.Contains(recs[0].Error, "cancelled by alice") {
		t.Errorf("audit: got %+v, want one cancelled record naming alice", recs)
	}
}

// TestMemoryLimitsSlotWait: a caller waits for a free slot and takes it
// when another is released; at its deadline it gets the context's error.
func TestMemoryLimitsSlotWait(t *testing.T) {
	t.Parallel()
	m := NewMemoryLimits()
	rel, err := m.Acquire(t.Context(), Execution{ID: "a"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := m.Acquire(ctx, Execution{ID: "b"}, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second slot of one: got %v, want the deadline", err)
	}
	got := make(chan error, 1)
	go func() {
		r2, err := m.Acquire(t.Context(), Execution{ID: "c"}, 1)
		if err == nil {
			r2()
		}
		got <- err
	}()
	rel()
	if err := <-got; err != nil {
		t.Fatalf("waiting caller: got %v, want the released slot", err)
	}
}

// sharedRunner starts a runner of the helper server h in dir that keeps its
// executions in shared, as the runners of one bus share a LimitStore;
// process, when not empty, is its Config.Process.
func sharedRunner(t *testing.T, dir string, shared LimitStore, process string) *Runner {
	t.Helper()
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.Policy = policy(t, allowAll)
	cfg.Limits = shared
	cfg.Process = process
	return startRunner(t, cfg)
}

// serveOn answers r's request/reply subjects on a connection of its own to
// b until the test ends.
func serveOn(t *testing.T, b *bus.Bus, r *Runner) {
	t.Helper()
	stop, err := Serve(t.Context(), bustest.Connect(t, b).Conn(), b.Prefix(), r, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
}

// TestCancelReachesTheOwningRunner: two runners share a LimitStore and
// serve on one bus; a cancel that reaches the runner not running the
// execution is forwarded to its owner, and ActiveRemote lists it from either.
func TestCancelReachesTheOwningRunner(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	shared := NewMemoryLimits()
	dir := t.TempDir()
	owner, other := sharedRunner(t, dir, shared, ""), sharedRunner(t, dir, shared, "")
	serveOn(t, b, owner)
	serveOn(t, b, other)
	done := make(chan *Result, 1)
	go func() {
		done <- owner.Call(t.Context(), Request{CallID: "remote-slow", Tool: "h.slow", Args: map[string]any{"ms": 20000}, Caller: Caller{Role: "agent"}})
	}()
	nc := b.Conn()
	testenv.WaitFor(t, 10*time.Second, "the execution listed over the bus", func() bool {
		es, err := ActiveRemote(t.Context(), nc, b.Prefix())
		return err == nil && len(es) == 1 && es[0].ID == "remote-slow" && es[0].Owner == owner.ID()
	})
	if err := other.cancelAnywhere(t.Context(), nc, b.Prefix(), CancelRequest{ID: "remote-slow", Actor: "bob"}); err != nil {
		t.Fatalf("cancel through the other runner: %v", err)
	}
	if res := <-done; res.Status != StatusCancelled || res.CancelledBy != "bob" {
		t.Errorf("got %s (%v) by %q, want cancelled by bob", res.Status, res.Err, res.CancelledBy)
	}
	var re *rpc.Error
	if err := CancelRemote(t.Context(), nc, b.Prefix(), "remote-slow", "bob"); !errors.As(err, &re) || !strings.Contains(re.Message, "no active execution remote-slow") {
		t.Errorf("cancel of a finished execution: got %v, want an error saying it is not active", err)
	}
}

// TestCancelOfAProcessExecution: an execution of a process that takes no
// cancels over NATS (`relay mcp call`, Config.Process) is not forwarded: the
// cancel's error names that process and says how to stop it.
func TestCancelOfAProcessExecution(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	shared := NewMemoryLimits()
	dir := t.TempDir()
	serveOn(t, b, sharedRunner(t, dir, shared, ""))
	const process = "relay mcp call (pid 42 on host-a)"
	cli := sharedRunner(t, dir, shared, process)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan *Result, 1)
	go func() {
		done <- cli.Call(ctx, Request{CallID: "cli-slow", Tool: "h.slow", Args: map[string]any{"ms": 20000}, Caller: Caller{Role: "agent"}})
	}()
	defer func() { cancel(); <-done }()
	nc := b.Conn()
	testenv.WaitFor(t, 10*time.Second, "the execution listed over the bus", func() bool {
		es, err := ActiveRemote(t.Context(), nc, b.Prefix())
		return err == nil && len(es) == 1 && es[0].ID == "cli-slow" && es[0].Process == process
	})
	var re *rpc.Error
	err := CancelRemote(t.Context(), nc, b.Prefix(), "cli-slow", "bob")
	if !errors.As(err, &re) || !strings.Contains(re.Message, "runs in relay mcp call (pid 42 on host-a)") || !strings.Contains(re.Message, "interrupt") || strings.Contains(re.Message, "runner") {
		t.Errorf("cancel of a CLI execution: got %v, want an error naming the process and how to stop it", err)
	}
}
