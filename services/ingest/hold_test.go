package ingest_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/ingest"
)

// electing is a bus whose stream has no leader while down is set: every
// publish fails as JetStream's does then (no responders), without reaching
// the bus.
type electing struct {
	*bus.Bus
	down  atomic.Bool
	calls atomic.Int64
	// upAfter, when positive, ends the election at that publish.
	upAfter int64
}

func (e *electing) Publish(ctx context.Context, subject string, env *envelope.Envelope, opts ...bus.PublishOption) (bus.PublishResult, error) {
	if n := e.calls.Add(1); e.upAfter > 0 && n >= e.upAfter {
		e.down.Store(false)
	}
	if e.down.Load() {
		return bus.PublishResult{}, fmt.Errorf("publish %s: %w: %w", subject, bus.ErrUnavailable, nats.ErrNoResponders)
	}
	return e.Bus.Publish(ctx, subject, env, opts...)
}

// TestHeldThroughElection: a webhook arriving while the inbound stream has
// no leader is held and published once a leader is back: 200, one envelope.
func TestHeldThroughElection(t *testing.T) {
	t.Parallel()
	b := &electing{Bus: bustest.Embedded(t), upAfter: 4}
	b.down.Store(true)
	gw := startGateway(t, b, ingest.Config{}, githubProvider())
	body := []byte(`{"action":"opened","issue":{"number":1,"title":"t","body":"b","user":{"login":"u"}},"repository":{"full_name":"o/r"},"sender":{"login":"u"}}`)
	start := time.Now()
	if code, msg := do(t, githubRequest(t, gw.url, "issues", "held-1", body)); code != http.StatusOK {
		t.Fatalf("got %d %q, want 200 once the leader is back", code, msg)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answered after %s, want soon after the leader is back", d)
	}
	if n := storedIn(t, b.Bus); n != 1 {
		t.Errorf("inbound stream holds %d messages, want 1", n)
	}
}

// TestHoldRunsOut: with no leader for longer than the hold, the answer is
// 503 with Retry-After after the hold and before the provider's deadline.
func TestHoldRunsOut(t *testing.T) {
	t.Parallel()
	b := &electing{Bus: bustest.Embedded(t)}
	b.down.Store(true)
	hold, deadline := 400*time.Millisecond, 2*time.Second
	gw := startGateway(t, b, ingest.Config{Limits: map[string]ingest.Limits{"github": {Deadline: deadline, Hold: hold}}}, githubProvider())
	start := time.Now()
	resp, err := http.DefaultClient.Do(githubRequest(t, gw.url, "ping", "held-2", []byte(`{"zen":"z"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("got %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if d < hold/2 || d >= deadline {
		t.Errorf("answered after %s, want between %s and %s", d, hold/2, deadline)
	}
	if n := b.calls.Load(); n < 3 {
		t.Errorf("publish tried %d times, want retries while held", n)
	}
}

// TestHeldBound: once MaxHeld requests are held, the next one is answered
// 503 at once instead of held (memory stays flat).
func TestHeldBound(t *testing.T) {
	t.Parallel()
	b := &electing{Bus: bustest.Embedded(t)}
	b.down.Store(true)
	gw := startGateway(t, b, ingest.Config{MaxHeld: 1, Limits: map[string]ingest.Limits{"github": {Hold: 3 * time.Second}}}, githubProvider())
	first := make(chan int, 1)
	go func() {
		code, _ := do(t, githubRequest(t, gw.url, "ping", "held-a", []byte(`{"zen":"a"}`)))
		first <- code
	}()
	// The first request holds the only token once it has retried.
	testenv.WaitFor(t, 3*time.Second, "the first request retried", func() bool { return b.calls.Load() >= 2 })
	start := time.Now()
	code, msg := do(t, githubRequest(t, gw.url, "ping", "held-b", []byte(`{"zen":"b"}`)))
	if code != http.StatusServiceUnavailable || time.Since(start) > time.Second {
		t.Errorf("second request: got %d %q after %s, want 503 at once", code, msg, time.Since(start))
	}
	b.down.Store(false)
	if code := <-first; code != http.StatusOK {
		t.Errorf("held request: got %d, want 200 once the leader is back", code)
	}
}
