package tools

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
)

// running is an execution in this runner: who cancelled it, and the
// context of its call once the call made it.
type running struct {
	// Guarded by Runner.execsMu: by, cause (Cancel's, when it came before
	// the call's context ended), and the call's context with its cancel
	// (nil before the call made it).
	by     string
	cause  error
	ctx    context.Context
	cancel context.CancelFunc
	// r, id and prev are what untrack needs.
	r    *Runner
	id   string
	prev *running
}

// ID is the runner's id, the Owner of the executions it registers.
func (r *Runner) ID() string { return r.id }

// newExecution describes req's execution: its id is the call envelope's id,
// else a fresh UUID; run id and actor take their defaults.
func (r *Runner) newExecution(req *Request, server, tool string, start time.Time) Execution {
	id := req.CallID
	if id == "" {
		id = newID()
	}
	return Execution{
		ID:      id,
		Server:  server,
		Tool:    tool,
		Thread:  req.Thread,
		Actor:   cmp.Or(req.Actor, req.ActsFor, req.Caller.AgentID),
		RunID:   cmp.Or(req.RunID, req.TaskID, id),
		Started: start.UTC(),
		Owner:   r.id,
		Process: r.cfg.Process,
	}
}

// track lets Cancel(id) find the execution until run.untrack is called;
// the call's context, once made, is given to run.started.
func (r *Runner) track(id string) *running {
	run := &running{r: r, id: id}
	r.execsMu.Lock()
	run.prev = r.execs[id]
	r.execs[id] = run
	r.execsMu.Unlock()
	return run
}

// started makes ctx, the call's context, the one Cancel cancels. A Cancel
// that came before cancels it at once.
func (run *running) started(ctx context.Context, cancel context.CancelFunc) {
	run.r.execsMu.Lock()
	run.ctx, run.cancel = ctx, cancel
	early := run.cause != nil
	run.r.execsMu.Unlock()
	if early {
		cancel()
	}
}

// cancelCause is Cancel's cause when it cancelled the call, else nil.
func (run *running) cancelCause() error {
	run.r.execsMu.Lock()
	defer run.r.execsMu.Unlock()
	return run.cause
}

// untrack ends what track began: Cancel no longer finds the execution.
func (run *running) untrack() {
	r := run.r
	r.execsMu.Lock()
	if r.execs[run.id] == run {
		if run.prev != nil {
			r.execs[run.id] = run.prev
		} else {
			delete(r.execs, run.id)
		}
	}
	r.execsMu.Unlock()
}

// cancelledBy is read after untrack: Cancel writes by under the lock that
// untrack takes, and cannot find the execution after it.
func (run *running) cancelledBy() string { return run.by }

// Cancel cancels the execution id if it runs in this runner and reports
// whether it did. The call ends with status cancelled, its server gets
// notifications/cancelled, and its audit record names actor in cancelled_by.
func (r *Runner) Cancel(id, actor string) bool {
	actor = cmp.Or(actor, "an operator")
	r.execsMu.Lock()
	run := r.execs[id]
	var cancel context.CancelFunc
	if run != nil {
		if run.by == "" {
			run.by = actor
		}
		// The first end of the call's context is its cause, as with a
		// context's own cancel.
		if run.cause == nil && (run.ctx == nil || run.ctx.Err() == nil) {
			run.cause, cancel = fmt.Errorf("execution %s cancelled by %s", id, actor), run.cancel
		}
	}
	r.execsMu.Unlock()
	if run == nil {
		return false
	}
	if cancel != nil {
		cancel()
	}
	return true
}

// Active lists the executions holding a concurrency slot in every runner
// that shares this runner's LimitStore, oldest first.
func (r *Runner) Active(ctx context.Context) ([]Execution, error) {
	es, err := r.cfg.Limits.Active(ctx)
	if err != nil {
		return nil, fmt.Errorf("list active executions: %w", err)
	}
	return es, nil
}

// newID returns a random (version 4) UUID. Its random bytes come from
// crypto/rand 16 ids at a time: a call needs two (its execution, its audit
// record), and one read of the system's source per id cost more than the
// rest of the id.
func newID() string {
	var u uuid.UUID
	ids.mu.Lock()
	if ids.left == 0 {
		_, _ = rand.Read(ids.buf[:]) // never fails (crypto/rand.Read)
		ids.left = len(ids.buf)
	}
	ids.left -= copy(u[:], ids.buf[len(ids.buf)-ids.left:])
	ids.mu.Unlock()
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant RFC 4122
	return u.String()
}

// ids is newID's buffered source of random bytes.
var ids struct {
	mu   sync.Mutex
	buf  [16 * 16]byte
	left int // the unused bytes at the end of buf
}
