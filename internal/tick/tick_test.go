package tick_test

import (
	"context"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/tick"
)

func TestEveryCallsUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick.Every(ctx, time.Millisecond, func() {
			calls++
			if calls == 3 {
				cancel()
			}
		})
	}()
	<-done
	if calls != 3 {
		t.Fatalf("got %d calls, want 3 (Every kept calling after cancel)", calls)
	}
}

func TestEveryReturnsOnDoneContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tick.Every(ctx, time.Hour, func() { t.Error("fn called on a done context") })
}
