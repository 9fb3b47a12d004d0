// Package tick runs periodic work owned by a context.
package tick

import (
	"context"
	"time"
)

// Every calls fn every interval until ctx is done, then returns; no call
// starts once ctx is done. The first call comes one interval after Every
// starts; a call that overruns the interval delays the next one rather than
// queueing calls. fn runs on the caller's goroutine, one call at a time.
func Every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil {
				return // both were ready: done wins
			}
			fn()
		}
	}
}
