package memory

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestThreadLocks(t *testing.T) {
	t.Parallel()
	l := newThreadLocks()
	ctx := t.Context()

	t.Run("OneHandlerPerThread", func(t *testing.T) {
		const handlers, each = 8, 200
		var wg sync.WaitGroup
		var inside, total int // guarded by the thread's lock
		for range handlers {
			wg.Go(func() {
				for range each {
					unlock, err := l.lock(ctx, "hot")
					if err != nil {
						t.Error(err)
						return
					}
					inside++
					if inside != 1 {
						t.Errorf("got %d handlers inside, want 1", inside)
					}
					total++
					inside--
					unlock()
				}
			})
		}
		wg.Wait()
		if total != handlers*each {
			t.Fatalf("got %d entries, want %d", total, handlers*each)
		}
		if n := l.len(); n != 0 {
			t.Fatalf("got %d threads left, want 0", n)
		}
	})

	t.Run("OtherThreadsGoOn", func(t *testing.T) {
		unlock, err := l.lock(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		unlockB, err := l.lock(octx, "b")
		if err != nil {
			t.Fatalf("thread b waited for thread a: %v", err)
		}
		unlockB()
	})

	t.Run("WaitEndsWithContext", func(t *testing.T) {
		unlock, err := l.lock(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := l.lock(wctx, "c"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want context.DeadlineExceeded", err)
		}
		unlock()
		again, err := l.lock(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		again()
	})

	t.Run("FirstInFirstOut", func(t *testing.T) {
		unlock, err := l.lock(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		const waiters = 5
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range waiters {
			wg.Go(func() {
				u, err := l.lock(ctx, "d")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				u()
			})
			// Let waiter i queue before waiter i+1 starts.
			pollRefs(t, l, "d", i+2)
		}
		unlock()
		wg.Wait()
		for i, w := range order {
			if w != i {
				t.Fatalf("got order %v, want arrival order", order)
			}
		}
	})
}

// pollRefs waits until n handlers hold or wait for thread.
func pollRefs(t *testing.T, l *threadLocks, thread string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		got := 0
		if tl := l.m[thread]; tl != nil {
			got = tl.refs
		}
		l.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d handlers on %s, want %d", got, thread, n)
		}
		time.Sleep(time.Millisecond)
	}
}
