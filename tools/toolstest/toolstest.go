// Package toolstest starts tool runners for the tests of the packages that
// call tools through one: a runner built from a tools.Config, started on the
// test's context, closed when the test ends.
package toolstest

import (
	"context"
	"testing"
	"time"

	"github.com/relaystation/relay/tools"
)

// ReadyWithin is how long Ready waits for a runner's servers: starting a
// server over stdio can take seconds on a loaded machine.
const ReadyWithin = 30 * time.Second

// Start builds a runner from cfg and starts it on the test's context; the
// runner is closed when the test ends. Its servers may still be connecting:
// Ready waits for them.
func Start(tb testing.TB, cfg tools.Config) *tools.Runner {
	tb.Helper()
	r, err := tools.New(cfg)
	if err != nil {
		tb.Fatalf("tools.New: %v", err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	if err := r.Start(tb.Context()); err != nil {
		tb.Fatalf("start the tool runner: %v", err)
	}
	return r
}

// Ready waits until every enabled server of r is ready, and fails the test
// naming those that are not after ReadyWithin.
func Ready(tb testing.TB, r *tools.Runner) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), ReadyWithin)
	defer cancel()
	if pending := r.WaitReady(ctx); len(pending) > 0 {
		tb.Fatalf("tool servers not ready after %s: %v (%+v)", ReadyWithin, pending, r.Servers())
	}
}

// StartReady is Start, then Ready.
func StartReady(tb testing.TB, cfg tools.Config) *tools.Runner {
	tb.Helper()
	r := Start(tb, cfg)
	Ready(tb, r)
	return r
}
