package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

// recorder is a testing.TB that records failures; Fatalf ends its goroutine
// as testing.T's does.
type recorder struct {
	testing.TB
	failures []string
	cleanups []func()
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// run calls f with the recorder on a goroutine of its own, as a test runs.
func (r *recorder) run(f func(t testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
}

func TestWaitFor(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	var r recorder
	r.run(func(tb testing.TB) {
		testenv.WaitFor(tb, 5*time.Second, "three calls", func() bool { return n.Add(1) == 3 })
	})
	if len(r.failures) != 0 || n.Load() != 3 {
		t.Errorf("got failures %q after %d calls, want none after 3", r.failures, n.Load())
	}

	r = recorder{}
	r.run(func(tb testing.TB) {
		testenv.WaitFor(tb, 30*time.Millisecond, "never", func() bool { return false })
	})
	if len(r.failures) != 1 || !strings.Contains(r.failures[0], "waiting for never") {
		t.Errorf("got failures %q, want one naming what it waited for", r.failures)
	}
}

func TestPoll(t *testing.T) {
	t.Parallel()
	var r recorder
	calls := 0
	r.run(func(tb testing.TB) {
		testenv.Poll(tb, 30*time.Millisecond, func() (bool, string) {
			calls++
			return false, fmt.Sprintf("call %d", calls)
		})
	})
	if want := fmt.Sprintf("call %d", calls); len(r.failures) != 1 || !strings.HasSuffix(r.failures[0], want) {
		t.Errorf("got failures %q, want one quoting the last reason %q", r.failures, want)
	}
}

func TestReceiveAndQuiet(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	var r recorder
	var got int
	r.run(func(tb testing.TB) { got = testenv.Receive(tb, ch, 5*time.Second, "a number") })
	if len(r.failures) != 0 || got != 7 {
		t.Errorf("got %d and failures %q, want 7 and none", got, r.failures)
	}

	r = recorder{}
	r.run(func(tb testing.TB) { testenv.Receive(tb, ch, 30*time.Millisecond, "a second number") })
	if len(r.failures) != 1 || !strings.Contains(r.failures[0], "waiting for a second number") {
		t.Errorf("got failures %q, want one naming what it waited for", r.failures)
	}

	r = recorder{}
	r.run(func(tb testing.TB) { testenv.Quiet(tb, ch, 30*time.Millisecond, "number") })
	if len(r.failures) != 0 {
		t.Errorf("got failures %q on a quiet channel, want none", r.failures)
	}
	ch <- 8
	r.run(func(tb testing.TB) { testenv.Quiet(tb, ch, 5*time.Second, "number") })
	if len(r.failures) != 1 || r.failures[0] != "unexpected number: 8" {
		t.Errorf("got failures %q, want one: unexpected number: 8", r.failures)
	}
}

func TestGo(t *testing.T) {
	t.Parallel()
	var r recorder
	started := make(chan struct{})
	stop := testenv.Go(&r, "service", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return errors.New("stopped badly")
	})
	<-started
	stop()
	stop() // a second stop (the cleanup) neither blocks nor reports again
	for _, c := range r.cleanups {
		c()
	}
	if len(r.failures) != 1 || r.failures[0] != "service: stopped badly" {
		t.Errorf("got failures %q, want one: service: stopped badly", r.failures)
	}
}

func TestFreeAddr(t *testing.T) {
	t.Parallel()
	addr := testenv.FreeAddr(t)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the free address %s: %v", addr, err)
	}
	l.Close()
	// Below the kernel's ephemeral range, where outgoing connections take
	// their local ports.
	if port := testenv.FreePort(t); port < 20000 || port >= 32000 {
		t.Errorf("got port %d, want one in 20000-31999", port)
	}
}

func TestErrorNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		err    error
		want   []string
		errors int
	}{
		{"names both", errors.New("RELAY_A and RELAY_B are wrong"), []string{"RELAY_A", "RELAY_B"}, 0},
		{"lacks one", errors.New("RELAY_A is wrong"), []string{"RELAY_A", "RELAY_B"}, 1},
		{"nil error", nil, []string{"RELAY_A", "RELAY_B"}, 2},
	} {
		r := &recorder{}
		r.run(func(t testing.TB) { testenv.ErrorNames(t, tc.err, tc.want...) })
		if len(r.failures) != tc.errors {
			t.Errorf("%s: got %d errors %q, want %d", tc.name, len(r.failures), r.failures, tc.errors)
		}
	}
}
