package tools

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestDailyQuotaFollowsTheDay: a budget's daily quota counts per UTC day
// (the clock's), per budget key, and a new day starts a new count.
func TestDailyQuotaFollowsTheDay(t *testing.T) {
	t.Parallel()
	pol := policy(t, "budgets:\n  s: {daily_quota: 2}\n  s.a: {daily_quota: 1}\n")
	var now atomic.Int64
	day1 := time.Date(2026, 11, 23, 23, 59, 0, 0, time.UTC)
	now.Store(day1.UnixNano())
	b := newBudgets(pol, NewMemoryLimits(), func() time.Time { return time.Unix(0, now.Load()) })
	admit := func(tool string) error {
		t.Helper()
		h, err := b.admit(t.Context(), Execution{ID: tool, Server: "s", Tool: tool})
		if err == nil {
			h.release()
		}
		return err
	}
	steps := []struct {
		at   time.Time
		tool string
		want error
	}{
		{day1, "a", nil},
		{day1, "a", ErrQuotaExhausted}, // s.a's 1 a day
		{day1, "b", nil},               // s's 2nd
		{day1, "b", ErrQuotaExhausted}, // s's 2 a day
		{day1.Add(2 * time.Minute), "a", nil},
		{day1.Add(2 * time.Minute), "a", ErrQuotaExhausted},
		{day1.Add(2 * time.Minute), "b", nil},
		{day1.Add(24 * time.Hour), "b", ErrQuotaExhausted},
		{day1.Add(48 * time.Hour), "b", nil},
	}
	for i, s := range steps {
		now.Store(s.at.UnixNano())
		if err := admit(s.tool); !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Fatalf("step %d (%s at %s): got %v, want %v", i, s.tool, s.at, err, s.want)
		}
	}
}

// TestSessionAndQuotaCounted: a call on a thread counts against its
// session and the day's quota at once, a threadless call against the quota
// alone (the plan's shared counters), and a call refused by either counts
// against neither.
func TestSessionAndQuotaCounted(t *testing.T) {
	t.Parallel()
	pol := policy(t, "budgets:\n  s: {daily_quota: 3}\nlimits: {perSession: 1}\n")
	var now atomic.Int64
	day1 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	b := newBudgets(pol, NewMemoryLimits(), func() time.Time { return time.Unix(0, now.Load()) })
	steps := []struct {
		at     time.Time
		thread string
		want   error
	}{
		{day1, "t1", nil},
		{day1, "t1", ErrLimitExceeded}, // t1's session is full; the quota keeps 2
		{day1, "", nil},
		{day1, "t2", nil},
		{day1, "", ErrQuotaExhausted},
		{day1, "t3", ErrQuotaExhausted}, // t3's session not counted
		{day1.Add(24 * time.Hour), "t3", nil},
		{day1.Add(24 * time.Hour), "t1", ErrLimitExceeded},
		{day1.Add(24 * time.Hour), "", nil},
	}
	for i, s := range steps {
		now.Store(s.at.UnixNano())
		h, err := b.admit(t.Context(), Execution{ID: strconv.Itoa(i), Server: "s", Tool: "t", Thread: s.thread})
		if err == nil {
			h.release()
		}
		if !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Fatalf("step %d (thread %q at %s): got %v, want %v", i, s.thread, s.at, err, s.want)
		}
	}
}

// remoteLimits is a LimitStore that is not a *MemoryLimits: admit counts
// while it takes the slots, as with the store on the bus.
type remoteLimits struct{ *MemoryLimits }

// TestCountWhileTaking: with a store on the bus, the count and the slot
// are taken at once; a call refused by either keeps neither, and a refused
// count does not wait for a slot.
func TestCountWhileTaking(t *testing.T) {
	t.Parallel()
	pol := policy(t, "budgets:\n  s: {daily_quota: 2}\nlimits: {concurrency: 1}\n")
	mem := NewMemoryLimits()
	b := newBudgets(pol, remoteLimits{mem}, time.Now)
	ctx := t.Context()
	h, err := b.admit(ctx, Execution{ID: "1", Server: "s", Tool: "t"})
	if err != nil {
		t.Fatalf("first call: got %v, want admitted", err)
	}
	if active, _ := mem.Active(ctx); len(active) != 1 || active[0].ID != "1" {
		t.Fatalf("active: got %v, want execution 1", active)
	}
	// The one slot is taken: the second call waits for it until its deadline
	// and takes its count back.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = b.admit(short, Execution{ID: "2", Server: "s", Tool: "t"})
	cancel()
	if !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("second call with the slot taken: got %v, want ErrLimitExceeded", err)
	}
	h.release()
	if _, err := b.admit(ctx, Execution{ID: "3", Server: "s", Tool: "t"}); err != nil {
		t.Fatalf("third call: got %v, want admitted (the second call's count was taken back)", err)
	}
	// Slot held by 3 and the quota used up: the refusal comes from the
	// count, at once, without waiting for the slot (ctx has no deadline).
	if _, err := b.admit(ctx, Execution{ID: "4", Server: "s", Tool: "t"}); !errors.Is(err, ErrQuotaExhausted) {
		t.Fatalf("fourth call: got %v, want ErrQuotaExhausted", err)
	}
	if active, _ := mem.Active(ctx); len(active) != 1 || active[0].ID != "3" {
		t.Fatalf("active: got %v, want only execution 3", active)
	}
}
