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

// running is an execution in this runner: its cancel and who used it.
type running struct {
	cancel context.CancelCauseFunc
	by     string // guarded by Runner.execsMu
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
	}
}

// track makes ctx cancellable by Cancel(id) until run.untrack is called.
func (r *Runner) track(ctx context.Context, id string) (context.Context, *running) {
	ctx, cancel := context.WithCancelCause(ctx)
	run := &running{cancel: cancel, r: r, id: id}
	r.execsMu.Lock()
	run.prev = r.execs[id]
	r.execs[id] = run
	r.execsMu.Unlock()
	return ctx, run
}

// untrack ends what track began: Cancel no longer finds the execution, and
// its context is cancelled.
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
	run.cancel(nil)
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
	if run != nil && run.by == "" {
		run.by = actor
	}
	r.execsMu.Unlock()
	if run == nil {
		return false
	}
	run.cancel(fmt.Errorf("execution %s cancelled by %s", id, actor))
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
