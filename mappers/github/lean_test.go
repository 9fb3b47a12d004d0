package github

import (
	"reflect"
	"testing"

	gojson "github.com/goccy/go-json"
	gh "github.com/google/go-github/v60/github"

	"github.com/relaystation/relay/mappers/mapperstest"
)

// leanAndFull fills facts from payload twice, through the lean decode and
// through go-github's whole typed decode. ok is false when the whole decode
// refuses the payload (the lean one may accept more: it skips what it does
// not read).
func leanAndFull(t *testing.T, event string, payload []byte) (lean, full *facts, ok bool) {
	t.Helper()
	p := New(Config{})
	ev := gh.EventForType(event)
	if err := gojson.Unmarshal(payload, ev); err != nil {
		return nil, nil, false
	}
	full = &facts{event: event}
	fullTyped := p.typed(full, event, ev)
	lev, err := leanKinds[event](payload)
	if err != nil {
		t.Fatalf("lean decode refused a payload go-github decodes: %v", err)
	}
	lean = &facts{event: event}
	if leanTyped := p.typed(lean, event, lev); leanTyped != fullTyped {
		t.Fatalf("typed: lean %v, full %v", leanTyped, fullTyped)
	}
	return lean, full, true
}

// TestLeanMatchesFull: for every real payload of a lean kind, the fillers
// gather the same facts from the lean decode as from the whole one.
func TestLeanMatchesFull(t *testing.T) {
	t.Parallel()
	n := 0
	for _, pl := range mapperstest.Payloads(t, "testdata/payloads/*.json") {
		if _, ok := leanKinds[pl.Stem()]; !ok {
			continue
		}
		n++
		t.Run(pl.Name, func(t *testing.T) {
			t.Parallel()
			lean, full, ok := leanAndFull(t, pl.Stem(), pl.Body)
			if !ok {
				t.Fatal("go-github refuses the payload")
			}
			if !reflect.DeepEqual(lean, full) {
				t.Errorf("got %+v from the lean decode, want %+v", lean, full)
			}
		})
	}
	if n < 10 {
		t.Fatalf("got %d payloads of lean kinds, want at least 10", n)
	}
}

// FuzzLeanMatchesFull: whatever go-github decodes, the lean decode gives the
// same facts for.
func FuzzLeanMatchesFull(f *testing.F) {
	for _, pl := range mapperstest.Payloads(f, "testdata/payloads/*.json") {
		if _, ok := leanKinds[pl.Stem()]; ok && len(pl.Body) <= 20000 {
			f.Add(pl.Stem(), pl.Body)
		}
	}
	f.Add("issues", []byte(`{"issue":{"labels":[null,{"name":"x"}],"pull_request":null},"repository":null}`))
	f.Fuzz(func(t *testing.T, event string, payload []byte) {
		if _, ok := leanKinds[event]; !ok {
			return
		}
		lean, full, ok := leanAndFull(t, event, payload)
		if ok && !reflect.DeepEqual(lean, full) {
			t.Errorf("got %+v from the lean decode, want %+v", lean, full)
		}
	})
}
