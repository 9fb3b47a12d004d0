package tools

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// The delays between failed checks follow the specification: 1s, 5s, then
// the 3rd failure disables; 15s is reached only with a higher threshold.
func TestHealthBackoffSchedule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		disableAfter int
		want         []time.Duration
	}{
		{3, []time.Duration{time.Second, 5 * time.Second}},
		{5, []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 15 * time.Second}},
	}
	for _, tt := range tests {
		r, err := New(Config{DisableAfter: tt.disableAfter, Servers: []mcpconfig.Server{{Name: "s", Type: mcpconfig.Stdio, Command: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		c := r.conns["s"]
		var got []time.Duration
		for c.status().State != StateDisabled {
			d := c.afterCheck(t.Context(), false, errors.New("refused"))
			if c.status().State != StateDisabled {
				got = append(got, d)
			}
			if len(got) > 10 {
				break
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("threshold %d: got retries after %v, want %v", tt.disableAfter, got, tt.want)
		}
		if st := c.status(); st.Failures != tt.disableAfter || st.DisabledBy != "health" {
			t.Errorf("threshold %d: got %+v", tt.disableAfter, st)
		}
		// A good ping resets the count; a handshake alone does not.
		c.enable()
		c.afterCheck(t.Context(), false, errors.New("refused"))
		c.afterCheck(t.Context(), false, nil)
		if f := c.status().Failures; f != 1 {
			t.Errorf("after a handshake: got %d failures, want 1", f)
		}
		c.afterCheck(t.Context(), true, nil)
		if f := c.status().Failures; f != 0 {
			t.Errorf("after a good ping: got %d failures, want 0", f)
		}
		_ = r.Close()
	}
}

// The orchestrator's declarations in an mcp.json entry (capabilities,
// schemaVersion) are not enforced but shown in the server's status.
func TestStatusShowsDeclarations(t *testing.T) {
	t.Parallel()
	s := mcpconfig.Server{Name: "s", Type: mcpconfig.Stdio, Command: "x", Capabilities: []string{"search", "fetch"}, SchemaVersion: "1.0.0"}
	r, err := New(Config{Servers: []mcpconfig.Server{s}})
	if err != nil {
		t.Fatal(err)
	}
	st := r.Servers()[0]
	if !slices.Equal(st.Capabilities, s.Capabilities) || st.SchemaVersion != "1.0.0" {
		t.Errorf("got capabilities %v, schema version %q; want %v, 1.0.0", st.Capabilities, st.SchemaVersion, s.Capabilities)
	}
}

// A state change that does not touch a server (the stop switch, another
// server disabled) leaves its consecutive failures alone; a new enable of it
// resets them.
func TestUnrelatedStateKeepsFailures(t *testing.T) {
	t.Parallel()
	r, err := New(Config{Servers: []mcpconfig.Server{
		{Name: "a", Type: mcpconfig.Stdio, Command: "x"},
		{Name: "b", Type: mcpconfig.Stdio, Command: "y"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	enabled := ServerState{By: "operator", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	r.applyState(State{Servers: map[string]ServerState{"a": enabled}})
	c := r.conns["a"]
	c.afterCheck(t.Context(), false, errors.New("refused"))
	c.afterCheck(t.Context(), false, errors.New("refused"))
	r.applyState(State{Servers: map[string]ServerState{"a": enabled}, Stop: true})
	r.applyState(State{Servers: map[string]ServerState{"a": enabled, "b": {Disabled: true, By: "operator", At: enabled.At}}})
	if f := c.status().Failures; f != 2 {
		t.Errorf("after unrelated state changes: got %d failures, want 2", f)
	}
	again := enabled
	again.At = enabled.At.Add(time.Minute)
	r.applyState(State{Servers: map[string]ServerState{"a": again}})
	if f := c.status().Failures; f != 0 {
		t.Errorf("after a new enable: got %d failures, want 0", f)
	}
}

// A session that ends while a ping is in flight is one failed check: the
// failed ping counts, and the end-of-session signal that raced with it is
// not counted again by the health loop.
func TestFailedPingCountsOnce(t *testing.T) {
	t.Parallel()
	r, err := New(Config{Servers: []mcpconfig.Server{{Name: "s", Type: mcpconfig.Stdio, Command: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	st, ct := mcp.NewInMemoryTransports()
	srv := mcp.NewServer(&mcp.Implementation{Name: "srv", Version: "1"}, nil)
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := r.conns["s"]
	c.mu.Lock()
	c.session = cs
	c.mu.Unlock()
	_ = ss.Close()
	c.signal(c.lost) // the session's end, reported while the ping was under way
	pinged, err := c.check(t.Context())
	if !pinged || err == nil {
		t.Fatalf("check: got pinged %t, err %v; want a failed ping", pinged, err)
	}
	if n := len(c.lost); n != 0 {
		t.Errorf("after the failed ping: %d end-of-session signals pending, want 0 (it would count the same failure twice)", n)
	}
}
