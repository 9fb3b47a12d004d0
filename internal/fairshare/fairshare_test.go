package fairshare

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
)

// clock is a settable time for the limiters of one test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// twoProcesses opens two limiters on two connections to one server, as two
// agent processes would.
func twoProcesses(t *testing.T, c *clock) (*Limiter, *Limiter) {
	t.Helper()
	b := bustest.Embedded(t)
	var out [2]*Limiter
	for i, bb := range []any{b, bustest.Connect(t, b)} {
		l, err := Open(t.Context(), bb.(Opener), b.Prefix(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		l.now = c.now
		out[i] = l
	}
	return out[0], out[1]
}

func TestTakeSharesOneCountAcrossProcesses(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 12, 2, 12, 0, 10, 0, time.UTC)}
	a, b := twoProcesses(t, c)
	const limit, takes = 30, 100
	var mu sync.Mutex
	allowed, first := 0, 0
	var wg sync.WaitGroup
	for i := range takes {
		wg.Go(func() {
			l := a
			if i%2 == 1 {
				l = b
			}
			v, err := l.Take(t.Context(), "github:octo/hello", limit)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if v.Allowed {
				allowed++
			}
			if v.FirstOver {
				first++
			}
		})
	}
	wg.Wait()
	if allowed != limit || first != 1 {
		t.Fatalf("got %d allowed and %d first-over of %d takes, want %d and 1", allowed, first, takes, limit)
	}
	// Another source has its own count; the next window starts again.
	if v, err := a.Take(t.Context(), "github:octo/other", limit); err != nil || !v.Allowed || v.Count != 1 {
		t.Fatalf("other source: got %+v, %v, want allowed with count 1", v, err)
	}
	c.add(time.Minute)
	if v, err := b.Take(t.Context(), "github:octo/hello", limit); err != nil || !v.Allowed || v.Count != 1 {
		t.Fatalf("next window: got %+v, %v, want allowed with count 1", v, err)
	}
}

func TestDigestIsBoundedAndDueOnceAfterItsWindow(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 12, 2, 12, 0, 10, 0, time.UTC)}
	a, b := twoProcesses(t, c)
	v, err := a.Take(t.Context(), "github:octo/hello", 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * MaxItems {
		if err := a.Defer(t.Context(), v, Item{EnvelopeID: fmt.Sprint("e", i), Title: fmt.Sprint("issue ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if due, err := b.Due(t.Context()); err != nil || len(due) != 0 {
		t.Fatalf("before the window ends: got %d due, %v, want none", len(due), err)
	}
	c.add(time.Minute + Grace)
	due, err := b.Due(t.Context())
	if err != nil || len(due) != 1 {
		t.Fatalf("after the window: got %d due, %v, want 1", len(due), err)
	}
	d := due[0]
	if d.Count != 3*MaxItems || len(d.Items) != MaxItems || d.Items[0].EnvelopeID != "e0" || d.Source != "github:octo/hello" {
		t.Fatalf("got digest of %s with count %d and %d items (first %+v), want count %d, %d items from e0",
			d.Source, d.Count, len(d.Items), d.Items[0], 3*MaxItems, MaxItems)
	}
	again, err := a.Due(t.Context())
	if err != nil || len(again) != 1 {
		t.Fatalf("second reader: got %d due, %v", len(again), err)
	}
	if ok, err := b.Done(t.Context(), d); err != nil || !ok {
		t.Fatalf("done: got %v, %v, want true", ok, err)
	}
	if ok, err := a.Done(t.Context(), again[0]); err != nil || ok {
		t.Fatalf("second done: got %v, %v, want false (the other process took it)", ok, err)
	}
	if due, err := a.Due(t.Context()); err != nil || len(due) != 0 {
		t.Fatalf("after done: got %d due, %v, want none", len(due), err)
	}
}
