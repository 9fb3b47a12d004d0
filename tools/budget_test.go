package tools

import (
	"errors"
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
		release, err := b.admit(t.Context(), Execution{ID: tool, Server: "s", Tool: tool})
		if err == nil {
			release()
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
