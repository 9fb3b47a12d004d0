package tools

import (
	"context"
	"maps"
	"sync"
	"time"
)

// ServerState is the persisted, operator-visible state of one server.
type ServerState struct {
	// Disabled overrides the mcp.json "disabled" flag when the entry exists.
	Disabled bool `json:"disabled"`
	// Reason says why, in words.
	Reason string `json:"reason,omitempty"`
	// By is "operator" (relay mcp enable|disable) or "health" (auto-disabled).
	By string `json:"by,omitempty"`
	// At is when the state was set.
	At time.Time `json:"at"`
}

// same reports whether s and o are the same setting (At compared as an instant).
func (s ServerState) same(o ServerState) bool {
	return s.Disabled == o.Disabled && s.Reason == o.Reason && s.By == o.By && s.At.Equal(o.At)
}

// State is everything a StateStore keeps.
type State struct {
	// Servers holds the servers that have an entry.
	Servers map[string]ServerState
	// Stop is the persisted stop switch.
	Stop bool
}

// StateStore persists server states and the stop switch so that operator
// commands in another process reach a running runner. Implementations must
// be safe for concurrent use.
type StateStore interface {
	// Load returns the current state.
	Load(ctx context.Context) (State, error)
	// SetServer stores one server's state.
	SetServer(ctx context.Context, name string, st ServerState) error
	// SetStop stores the stop switch.
	SetStop(ctx context.Context, stop bool) error
	// Watch calls fn with the whole state after every change until ctx is
	// cancelled; it returns nil then.
	Watch(ctx context.Context, fn func(State)) error
}

// MemoryState is an in-process StateStore, for tests and single-process use.
type MemoryState struct {
	mu       sync.Mutex
	st       State
	watchers map[int]chan State
	next     int
}

// NewMemoryState returns an empty MemoryState.
func NewMemoryState() *MemoryState {
	return &MemoryState{st: State{Servers: map[string]ServerState{}}, watchers: map[int]chan State{}}
}

func (m *MemoryState) copyLocked() State {
	return State{Servers: maps.Clone(m.st.Servers), Stop: m.st.Stop}
}

// Load returns a copy of the state.
func (m *MemoryState) Load(context.Context) (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.copyLocked(), nil
}

// SetServer stores st and notifies watchers.
func (m *MemoryState) SetServer(_ context.Context, name string, st ServerState) error {
	m.mu.Lock()
	m.st.Servers[name] = st
	m.notifyLocked()
	m.mu.Unlock()
	return nil
}

// SetStop stores the stop switch and notifies watchers.
func (m *MemoryState) SetStop(_ context.Context, stop bool) error {
	m.mu.Lock()
	m.st.Stop = stop
	m.notifyLocked()
	m.mu.Unlock()
	return nil
}

func (m *MemoryState) notifyLocked() {
	for _, ch := range m.watchers {
		s := m.copyLocked()
		select {
		case <-ch: // drop a stale, unread state
		default:
		}
		ch <- s
	}
}

// Watch implements StateStore.
func (m *MemoryState) Watch(ctx context.Context, fn func(State)) error {
	ch := make(chan State, 1)
	m.mu.Lock()
	id := m.next
	m.next++
	m.watchers[id] = ch
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.watchers, id)
		m.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-ch:
			fn(s)
		}
	}
}
