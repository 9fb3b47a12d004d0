package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
)

// apiError classifies itself the way the provider clients' errors do, without
// any of the bus's own wrappers.
type apiError struct {
	status int
	delay  time.Duration
}

func (e *apiError) Error() string             { return fmt.Sprintf("api: %d", e.status) }
func (e *apiError) Permanent() bool           { return e.status >= 400 && e.status < 500 && e.status != 429 }
func (e *apiError) RetryDelay() time.Duration { return e.delay }

var _ bus.Classified = (*apiError)(nil)

func TestClassification(t *testing.T) {
	t.Parallel()
	notFound := &apiError{status: 404}
	limited := &apiError{status: 429, delay: 7 * time.Second}
	cases := []struct {
		name      string
		err       error
		permanent bool
		delay     time.Duration
	}{
		{"nil", nil, false, 0},
		{"plain", errors.New("down"), false, 0},
		{"bus.Permanent", bus.Permanent(errors.New("bad")), true, 0},
		{"wrapped bus.Permanent", fmt.Errorf("handle: %w", bus.Permanent(errors.New("bad"))), true, 0},
		{"bus.RetryAfter", bus.RetryAfter(errors.New("busy"), 3*time.Second), false, 3 * time.Second},
		{"client permanent", notFound, true, 0},
		{"wrapped client permanent", fmt.Errorf("post x: %w", notFound), true, 0},
		{"client rate limit", fmt.Errorf("post x: %w", limited), false, 7 * time.Second},
		{"joined", errors.Join(errors.New("first"), notFound), true, 0},
		// The outermost classification decides.
		{"RetryAfter over permanent", bus.RetryAfter(notFound, time.Second), false, time.Second},
		{"Permanent over rate limit", bus.Permanent(limited), true, 0},
		{"negative delay", &apiError{status: 503, delay: -time.Second}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := bus.IsPermanent(tc.err); got != tc.permanent {
				t.Errorf("IsPermanent(%v): got %v, want %v", tc.err, got, tc.permanent)
			}
			if got := bus.RetryDelay(tc.err); got != tc.delay {
				t.Errorf("RetryDelay(%v): got %s, want %s", tc.err, got, tc.delay)
			}
		})
	}
}

// testClassifiedToDLQ: an error that classifies itself permanent (no
// bus.Permanent around it) is dead-lettered at its first delivery.
func testClassifiedToDLQ(t *testing.T, b *bus.Bus) {
	publish(t, b, "out.github", newEnv("to a deleted issue"))
	var calls atomic.Int32
	run(t, b, bus.ConsumerConfig{Name: "outbound", Subject: "out.>"}, func(context.Context, *bus.Message) error {
		calls.Add(1)
		return fmt.Errorf("post: %w", &apiError{status: 404})
	})
	dls := waitDLQ(t, b, 1)
	if dls[0].Deliveries != 1 || dls[0].Reason != "post: api: 404" {
		t.Errorf("got dead letter after %d deliveries, reason %q; want 1, %q", dls[0].Deliveries, dls[0].Reason, "post: api: 404")
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("handler called %d times, want 1", c)
	}
}

// testRetryDelayDrivesNak: an error's RetryDelay replaces the consumer's
// growing delay (here a minute, which would time the test out).
func testRetryDelayDrivesNak(t *testing.T, b *bus.Bus) {
	publish(t, b, "out.slack", newEnv("rate limited"))
	times := deliveryTimes(t, b, bus.ConsumerConfig{Name: "outbound", Subject: "out.>", NakDelays: []time.Duration{time.Minute}},
		2, 20*time.Second, func(m *bus.Message) error {
			if m.Delivered == 1 {
				return fmt.Errorf("post: %w", &apiError{status: 429, delay: 300 * time.Millisecond})
			}
			return nil
		})
	if d := times[1].Sub(times[0]); d < 250*time.Millisecond {
		t.Errorf("second delivery after %s, want >= 300ms (the error's RetryDelay)", d)
	}
	assertDLQ(t, b, 0)
}

// rateLimited is how a client's error classifies itself: the bus needs no
// wrapper around it.
type rateLimited struct{ after time.Duration }

func (e *rateLimited) Error() string             { return "429 Too Many Requests" }
func (e *rateLimited) Permanent() bool           { return false }
func (e *rateLimited) RetryDelay() time.Duration { return e.after }

// A handler's error picks the message's outcome through bus.Classified: the
// first error in the chain that implements it decides.
func ExampleClassified() {
	errs := []error{
		errors.New("connection refused"),                              // transient: the consumer's growing delay
		fmt.Errorf("post: %w", &rateLimited{after: 30 * time.Second}), // transient: after 30s
		bus.Permanent(errors.New("issue octo/hello#7 was deleted")),   // termed and dead-lettered
		bus.RetryAfter(errors.New("task leased by another process"), 5*time.Second),
	}
	for _, err := range errs {
		fmt.Printf("permanent=%v delay=%s: %v\n", bus.IsPermanent(err), bus.RetryDelay(err), err)
	}
	// Output:
	// permanent=false delay=0s: connection refused
	// permanent=false delay=30s: post: 429 Too Many Requests
	// permanent=true delay=0s: permanent: issue octo/hello#7 was deleted
	// permanent=false delay=5s: retry after 5s: task leased by another process
}
