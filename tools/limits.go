package tools

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Execution is one running tool call, as `relay mcp active` lists it.
type Execution struct {
	// ID is the tool-call envelope's id, else a fresh UUID (CLI calls).
	ID     string `json:"id"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Thread is the thread the call belongs to (empty for CLI calls).
	Thread string `json:"thread,omitempty"`
	// Actor is who the call runs for: a person, the agent, "cli:<user>".
	Actor string `json:"actor,omitempty"`
	// RunID is the audit run id (the task, a code block's thread, the CLI invocation).
	RunID   string    `json:"run_id,omitempty"`
	Started time.Time `json:"started"`
	// Owner is the id of the runner that runs it (where a cancel goes).
	Owner string `json:"owner"`
	// Process, when set, names the process that runs it, one that takes
	// no cancels over NATS (`relay mcp call`, `relay mcp test`); empty for
	// a tool runner's executions.
	Process string `json:"process,omitempty"`
}

// ProcessCancel says, for an execution of a process that takes no cancels
// over NATS (Process set), where it runs and how to stop it; "" for a tool
// runner's execution.
func (e Execution) ProcessCancel() string {
	if e.Process == "" {
		return ""
	}
	return fmt.Sprintf("execution %s runs in %s, which takes no cancels over NATS: interrupt that process (Ctrl-C) to cancel it; "+
		"its execution slot is freed when it ends (or, should it have died, when its lease expires)", e.ID, e.Process)
}

// Counter is one count a call adds to: a thread's session or a budget's
// day. Count refuses the call with Full when Key already holds Limit.
type Counter struct {
	// Key names the count ("session.<thread>", "quota.<day>.<budget>").
	Key string
	// Limit is the most calls the key may count (at least 1).
	Limit int
	// Full is the error of a refused call; it names the limit.
	Full error
}

// LimitStore holds the limits that must hold across runner processes and
// restarts: the per-thread session counts and daily quotas (Count), and the
// global concurrency slots, each held by one active execution (Acquire).
// Implementations must be safe for concurrent use. MemoryLimits keeps them
// in this process; services/toolrunner keeps them in JetStream key-value
// buckets, so every runner on a bus shares them.
type LimitStore interface {
	// Count adds one to every counter, or to none when one is at its limit
	// (then the error is that counter's Full). undo takes the counts back.
	Count(ctx context.Context, counters []Counter) (undo func(), err error)
	// Acquire takes one of slots concurrency slots for e, waiting while
	// every slot is taken until ctx ends (then it returns ctx's error), and
	// lists e as active until release is called. A process that dies
	// without releasing must not hold its slots forever.
	Acquire(ctx context.Context, e Execution, slots int) (release func(), err error)
	// Active lists the executions holding a slot, oldest first.
	Active(ctx context.Context) ([]Execution, error)
}

// MemoryLimits is a LimitStore for one process (tests, the standalone CLI).
type MemoryLimits struct {
	mu     sync.Mutex
	counts map[string]int
	active map[string]*memSlot // by execution id (#n for a repeated one)
	freed  chan struct{}       // closed and replaced when a slot is released while waiting is set
	// waiting says an Acquire waits on freed.
	waiting bool
}

// NewMemoryLimits returns an empty MemoryLimits.
func NewMemoryLimits() *MemoryLimits {
	return &MemoryLimits{counts: map[string]int{}, active: map[string]*memSlot{}, freed: make(chan struct{})}
}

// Count implements LimitStore.
func (m *MemoryLimits) Count(_ context.Context, counters []Counter) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range counters {
		if m.counts[c.Key] >= c.Limit {
			return nil, c.Full
		}
	}
	for _, c := range counters {
		m.counts[c.Key]++
	}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, c := range counters {
			if m.counts[c.Key] > 0 {
				m.counts[c.Key]--
			}
		}
	}, nil
}

// Acquire implements LimitStore.
func (m *MemoryLimits) Acquire(ctx context.Context, e Execution, slots int) (func(), error) {
	for {
		m.mu.Lock()
		if len(m.active) < slots {
			key := e.ID
			for n := 2; m.active[key] != nil; n++ { // a repeated id keeps its own slot
				key = fmt.Sprintf("%s#%d", e.ID, n)
			}
			s := &memSlot{m: m, key: key, e: e}
			m.active[key] = s
			m.mu.Unlock()
			return s.release, nil
		}
		m.waiting = true
		freed := m.freed
		m.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// memSlot is one slot a MemoryLimits handed out, held by e; release frees
// it once.
type memSlot struct {
	m        *MemoryLimits
	key      string
	e        Execution
	released atomic.Bool
}

func (s *memSlot) release() {
	if s.released.CompareAndSwap(false, true) {
		s.m.release(s.key)
	}
}

func (m *MemoryLimits) release(key string) {
	m.mu.Lock()
	delete(m.active, key)
	if m.waiting {
		close(m.freed)
		m.freed, m.waiting = make(chan struct{}), false
	}
	m.mu.Unlock()
}

// Active implements LimitStore.
func (m *MemoryLimits) Active(context.Context) ([]Execution, error) {
	m.mu.Lock()
	out := make([]Execution, 0, len(m.active))
	for _, s := range m.active {
		out = append(out, s.e)
	}
	m.mu.Unlock()
	SortExecutions(out)
	return out, nil
}

// SortExecutions orders executions oldest first, then by id.
func SortExecutions(es []Execution) {
	slices.SortFunc(es, func(a, b Execution) int {
		return cmp.Or(a.Started.Compare(b.Started), cmp.Compare(a.ID, b.ID))
	})
}
