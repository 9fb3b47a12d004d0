package session

import (
	"fmt"
	"testing"
	"time"
)

// TestOwned: ids that left are known until the id window (and a minute's
// grace) has passed since their generation began; past its bound an owned
// session says every id may have left, so the id keys are asked.
func TestOwned(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := newOwned(8 * time.Minute) // generations of a minute
	o.left(t0, []string{"a", "b"})
	o.left(t0.Add(30*time.Second), []string{"c"})
	o.left(t0.Add(90*time.Second), []string{"d"})
	for _, id := range []string{"a", "b", "c", "d"} {
		if !o.mayHaveLeft(id) {
			t.Fatalf("%s left: mayHaveLeft = false", id)
		}
	}
	if o.mayHaveLeft("e") {
		t.Fatal("e never left: mayHaveLeft = true")
	}
	if len(o.gens) != 2 || o.n != 4 {
		t.Fatalf("got %d generations holding %d ids, want 2 holding 4", len(o.gens), o.n)
	}
	// The first generation (a, b, c) ends after a minute; it is dropped once
	// the window and the grace have passed since then.
	o.left(t0.Add(10*time.Minute+time.Second), []string{"f"})
	if o.mayHaveLeft("a") || o.mayHaveLeft("c") {
		t.Fatal("ids of a generation older than the window are still kept")
	}
	if !o.mayHaveLeft("d") || !o.mayHaveLeft("f") {
		t.Fatal("ids within the window were dropped")
	}

	small := &owned{window: time.Hour, max: 10}
	for i := range 11 {
		small.left(t0, []string{fmt.Sprint(i)})
	}
	if !small.lost || !small.mayHaveLeft("never") {
		t.Fatal("past its bound: want every id reported as possibly left")
	}
	if small.n != 0 || small.gens != nil {
		t.Fatalf("past its bound it still keeps %d ids", small.n)
	}
}
