package memory_test

import (
	"errors"
	"testing"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/memory"
)

// TestObserveAll: envelopes of one thread observed together land as turns in
// order, each outcome is its own (a malformed memory_update fails only its
// envelope, and stores no turn), and a repeated envelope is one turn.
func TestObserveAll(t *testing.T) {
	t.Parallel()
	m, th := threadMemory(t, "github:acme/api#")
	ctx := t.Context()
	a := env(th, envelope.RoleUser, "first")
	bad := env(th, envelope.RoleSystem, "with a bad update")
	bad.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryEpisodic}
	note := env(th, envelope.RoleAssistant, "second")
	note.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryEpisodic, Data: map[string]any{"fact": "deploys on fridays"}}
	c := env(th, envelope.RoleUser, "third")
	errs := m.ObserveAll(ctx, th, a, bad, note, a, c)
	for i, err := range errs {
		if wantBad := i == 1; wantBad != errors.Is(err, memory.ErrBadUpdate) || (!wantBad && err != nil) {
			t.Fatalf("envelope %d: got %v", i, err)
		}
	}
	sc, err := m.Context(ctx, th, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tu := range sc.Turns {
		got = append(got, tu.Content)
	}
	if len(got) != 3 || got[0] != "first" || got[1] != "second" || got[2] != "third" {
		t.Fatalf("got turns %q, want first, second, third", got)
	}
	if len(sc.Episodes) != 1 || sc.Episodes[0].Data["fact"] != "deploys on fridays" {
		t.Fatalf("got episodes %+v, want the valid update's", sc.Episodes)
	}
}
