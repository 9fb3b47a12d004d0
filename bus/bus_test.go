package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
)

// The conformance suite runs every case against an in-process server and
// against the machine's NATS server (NATS_URL).
func TestBus(t *testing.T) {
	t.Parallel()
	impls := map[string]func(t *testing.T) *bus.Bus{
		"embedded": func(t *testing.T) *bus.Bus { return bustest.Embedded(t) },
		"external": func(t *testing.T) *bus.Bus { return bustest.External(t) },
	}
	cases := map[string]func(t *testing.T, b *bus.Bus){
		"PublishConsume":         testPublishConsume,
		"DedupInsideWindow":      testDedup,
		"InvalidRefused":         testInvalidRefused,
		"NakDelayRedelivery":     testNakDelay,
		"PermanentToDLQ":         testPermanentToDLQ,
		"ClassifiedToDLQ":        testClassifiedToDLQ,
		"RetryDelayDrivesNak":    testRetryDelayDrivesNak,
		"MaxDeliveriesToDLQ":     testMaxDeliveries,
		"UnavailableHeld":        testUnavailableHeld,
		"UnavailableHoldEnds":    testUnavailableHoldEnds,
		"UnavailableHoldStops":   testUnavailableHoldStops,
		"OtherMajorNotHandled":   testOtherMajorNotHandled,
		"DLQDownKeepsMessage":    testDLQDownKeepsMessage,
		"PoisonKillsItsWorker":   testPoisonThatKillsItsWorker,
		"InvalidBodyToDLQ":       testInvalidBody,
		"RedeliveryAfterCrash":   testRedeliveryAfterCrash,
		"ReplayFromDLQ":          testReplay,
		"CompetingConsumers":     testCompeting,
		"EveryWorkerTypeReads":   testFanOut,
		"HeartbeatLongHandler":   testHeartbeat,
		"ConcurrentHandlers":     testConcurrentHandlers,
		"ShutdownDrainsInFlight": testShutdownDrains,
		"DeliverNewFromStartUp":  testDeliverNewFromStartUp,
	}
	for impl, mk := range impls {
		t.Run(impl, func(t *testing.T) {
			t.Parallel()
			for name, tc := range cases {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					tc(t, mk(t))
				})
			}
		})
	}
}

func newEnv(content string) *envelope.Envelope {
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, content)
	e.Meta.Thread = envelope.GitHubThread("octo", "repo", 1)
	return e
}

// run consumes in the background until the test ends.
func run(t *testing.T, b *bus.Bus, cfg bus.ConsumerConfig, h bus.HandlerFunc) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Consume(ctx, cfg, h) }()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// On failure, say what the server thinks of the consumer.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if c, err := b.JetStream().Consumer(ctx, b.StreamName(cfg.Subject), cfg.Name); err == nil {
			if info, err := c.Info(ctx); err == nil {
				t.Logf("consumer %s: pending %d, ack pending %d, waiting pulls %d, redelivered %d, delivered %d/%d, ack floor %d",
					cfg.Name, info.NumPending, info.NumAckPending, info.NumWaiting, info.NumRedelivered,
					info.Delivered.Consumer, info.Delivered.Stream, info.AckFloor.Stream)
			}
		}
	})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Consume returned %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func publish(t *testing.T, b *bus.Bus, subj string, e *envelope.Envelope, opts ...bus.PublishOption) bus.PublishResult {
	t.Helper()
	res, err := b.Publish(t.Context(), subj, e, opts...)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return res
}

func testPublishConsume(t *testing.T, b *bus.Bus) {
	e := newEnv("hello")
	publish(t, b, "in.github.issues", e)
	got := make(chan *bus.Message, 1)
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>"}, func(_ context.Context, m *bus.Message) error {
		got <- m
		return nil
	})
	m := testenv.Receive(t, got, 10*time.Second, "a message consumed")
	if m.Envelope.ID != e.ID || m.Envelope.Content != "hello" {
		t.Errorf("got envelope %s %q, want %s %q", m.Envelope.ID, m.Envelope.Content, e.ID, "hello")
	}
	if m.Subject != "in.github.issues" {
		t.Errorf("got subject %q, want in.github.issues", m.Subject)
	}
	if h := envelope.DecodeHeader(m.Header); h.Thread != e.Meta.Thread {
		t.Errorf("got header thread %q, want %q", h.Thread, e.Meta.Thread)
	}
}

func testDedup(t *testing.T, b *bus.Bus) {
	first := publish(t, b, "in.github.issues", newEnv("a"), bus.WithMsgID("hook-1:delivery-1"))
	// A provider retry produces a new envelope (new id) with the same delivery id.
	second := publish(t, b, "in.github.issues", newEnv("a again"), bus.WithMsgID("hook-1:delivery-1"))
	other := publish(t, b, "in.github.issues", newEnv("b"), bus.WithMsgID("hook-1:delivery-2"))
	if first.Duplicate || !second.Duplicate || other.Duplicate {
		t.Fatalf("got duplicates %v %v %v, want false true false", first.Duplicate, second.Duplicate, other.Duplicate)
	}
	var n atomic.Int32
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>"}, func(context.Context, *bus.Message) error {
		n.Add(1)
		return nil
	})
	testenv.WaitFor(t, 20*time.Second, "two messages", func() bool { return n.Load() >= 2 })
	time.Sleep(200 * time.Millisecond) // a third would arrive now
	if got := n.Load(); got != 2 {
		t.Errorf("got %d messages, want 2", got)
	}
}

func testInvalidRefused(t *testing.T, b *bus.Bus) {
	e := newEnv("x")
	e.Channel = "fax"
	_, err := b.Publish(t.Context(), "in.github.issues", e)
	var ve *envelope.ValidationError
	if !errors.Is(err, bus.ErrInvalidEnvelope) || !errors.As(err, &ve) || ve.Field != "/channel" {
		t.Fatalf("got %v, want ErrInvalidEnvelope naming /channel", err)
	}
	info, err := b.JetStream().Stream(t.Context(), b.StreamName("in.x"))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("got %d stored messages, want 0", n)
	}
}

func testNakDelay(t *testing.T, b *bus.Bus) {
	publish(t, b, "tool.call", newEnv("flaky"))
	times := deliveryTimes(t, b, bus.ConsumerConfig{Name: "w", Subject: "tool.call", NakDelays: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond}},
		3, 10*time.Second, func(m *bus.Message) error {
			if m.Delivered < 3 {
				return errors.New("transient")
			}
			return nil
		})
	if d := times[1].Sub(times[0]); d < 250*time.Millisecond {
		t.Errorf("second delivery after %s, want >= 300ms", d)
	}
	if d := times[2].Sub(times[1]); d < 550*time.Millisecond {
		t.Errorf("third delivery after %s, want >= 600ms (growing delay)", d)
	}
	assertDLQ(t, b, 0)
}

// deliveryTimes consumes with cfg, answering every delivery with handle, and
// returns when the first n deliveries happened, waiting at most within.
func deliveryTimes(t *testing.T, b *bus.Bus, cfg bus.ConsumerConfig, n int, within time.Duration, handle func(*bus.Message) error) []time.Time {
	t.Helper()
	var (
		mu    sync.Mutex
		times []time.Time
	)
	run(t, b, cfg, func(_ context.Context, m *bus.Message) error {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return handle(m)
	})
	testenv.WaitFor(t, within, fmt.Sprintf("delivery %d", n), func() bool { mu.Lock(); defer mu.Unlock(); return len(times) >= n })
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(times[:n])
}

func assertDLQ(t *testing.T, b *bus.Bus, want int) []bus.StoredDeadLetter {
	t.Helper()
	dls, err := b.DeadLetters(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != want {
		t.Fatalf("got %d dead letters, want %d: %+v", len(dls), want, dls)
	}
	return dls
}

func waitDLQ(t *testing.T, b *bus.Bus, want int) []bus.StoredDeadLetter {
	t.Helper()
	var dls []bus.StoredDeadLetter
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("%d dead letters", want), func() bool {
		var err error
		dls, err = b.DeadLetters(t.Context(), 0)
		return err == nil && len(dls) >= want
	})
	return assertDLQ(t, b, want)
}

func testPermanentToDLQ(t *testing.T, b *bus.Bus) {
	if none, _ := json.Marshal(assertDLQ(t, b, 0)); string(none) != "[]" {
		t.Errorf("no dead letters encode as %s, want []", none)
	}
	e := newEnv("poison")
	publish(t, b, "in.github.issues", e)
	var calls atomic.Int32
	run(t, b, bus.ConsumerConfig{Name: "agent", Subject: "in.>"}, func(context.Context, *bus.Message) error {
		calls.Add(1)
		return bus.Permanent(errors.New("cannot map issue"))
	})
	dls := waitDLQ(t, b, 1)
	d := dls[0]
	if d.Consumer != "agent" || d.Subject != "in.github.issues" || d.Deliveries != 1 {
		t.Errorf("got dead letter %s %s %d, want agent in.github.issues 1", d.Consumer, d.Subject, d.Deliveries)
	}
	if want := "permanent: cannot map issue"; d.Reason != want {
		t.Errorf("got reason %q, want %q", d.Reason, want)
	}
	orig, err := envelope.Parse(d.Envelope)
	if err != nil || orig.ID != e.ID {
		t.Errorf("got original %v (%v), want envelope %s", orig, err, e.ID)
	}
	// The JSON form (relay dlq list -json) is the whole dead letter plus its seq.
	raw, err := json.Marshal(dls)
	if err != nil {
		t.Fatal(err)
	}
	var listed []map[string]any
	if err := json.Unmarshal(raw, &listed); err != nil || len(listed) != 1 {
		t.Fatalf("dead letters encode as %s (%v), want an array of one object", raw, err)
	}
	for _, k := range []string{"seq", "subject", "consumer", "reason", "deliveries", "stream_seq", "time", "envelope"} {
		if _, ok := listed[0][k]; !ok {
			t.Errorf("JSON dead letter lacks %q: %s", k, raw)
		}
	}
	if got := listed[0]["seq"]; got != float64(d.Seq) {
		t.Errorf("JSON seq %v, want %d", got, d.Seq)
	}
	time.Sleep(300 * time.Millisecond)
	if c := calls.Load(); c != 1 {
		t.Errorf("handler called %d times, want 1 (term stops redelivery)", c)
	}
}

func testMaxDeliveries(t *testing.T, b *bus.Bus) {
	publish(t, b, "in.github.issues", newEnv("always fails"))
	var calls atomic.Int32
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", MaxDeliver: 3, NakDelays: []time.Duration{50 * time.Millisecond}},
		func(context.Context, *bus.Message) error {
			calls.Add(1)
			return errors.New("backend down")
		})
	dls := waitDLQ(t, b, 1)
	if dls[0].Deliveries != 3 || calls.Load() != 3 {
		t.Errorf("got %d deliveries and %d calls, want 3 and 3", dls[0].Deliveries, calls.Load())
	}
	if want := "max deliveries (3) reached: backend down"; dls[0].Reason != want {
		t.Errorf("got reason %q, want %q", dls[0].Reason, want)
	}
}

// testUnavailableHeld: a handler that fails because the bus is unavailable
// (an election with no leader, seen through a publish) is handled again in
// the process, its delivery kept: the failures do not use up MaxDeliver, and
// the message is handled, not dead-lettered. The handler sees each run
// after the first as a redelivery (Retried).
func testUnavailableHeld(t *testing.T, b *bus.Bus) {
	e := newEnv("published through an election")
	publish(t, b, "in.github.issues", e)
	var mu sync.Mutex
	var runs []string
	done := make(chan struct{})
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", MaxDeliver: 1, NakDelays: []time.Duration{50 * time.Millisecond}},
		func(_ context.Context, m *bus.Message) error {
			mu.Lock()
			defer mu.Unlock()
			runs = append(runs, fmt.Sprintf("delivered %d retried %d", m.Delivered, m.Retried))
			if len(runs) < 3 {
				return fmt.Errorf("publish to tool.call: %w: nats: no response from stream", bus.ErrUnavailable)
			}
			close(done)
			return nil
		})
	testenv.Receive(t, done, 20*time.Second, "the third run")
	testenv.WaitFor(t, 10*time.Second, "the message acknowledged", func() bool {
		info, err := bustest.ConsumerInfo(t.Context(), b, "in.github.issues", "w")
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream > 0
	})
	assertDLQ(t, b, 0)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"delivered 1 retried 0", "delivered 1 retried 1", "delivered 1 retried 2"}; !slices.Equal(runs, want) {
		t.Errorf("got runs %q, want %q", runs, want)
	}
}

// testUnavailableHoldEnds: a bus that stays unavailable past the hold is a
// failure like any other: naked, and dead-lettered at MaxDeliver.
func testUnavailableHoldEnds(t *testing.T, b *bus.Bus) {
	publish(t, b, "in.github.issues", newEnv("the bus never comes back"))
	var calls atomic.Int32
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", MaxDeliver: 2, UnavailableHold: 1500 * time.Millisecond},
		func(context.Context, *bus.Message) error {
			calls.Add(1)
			return fmt.Errorf("%w: nats: no response from stream", bus.ErrUnavailable)
		})
	dls := waitDLQ(t, b, 1)
	if dls[0].Deliveries != 2 || calls.Load() < 4 {
		t.Errorf("got %d deliveries and %d calls, want 2 and at least 4 (each delivery held)", dls[0].Deliveries, calls.Load())
	}
}

// testUnavailableHoldStops: a consumer that shuts down ends its holds at
// once (it does not spend its shutdown grace holding) and gives the message
// back, for another process to take.
func testUnavailableHoldStops(t *testing.T, b *bus.Bus) {
	publish(t, b, "in.github.issues", newEnv("held while the worker stops"))
	first := make(chan struct{})
	var once sync.Once
	stop := run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", ShutdownGrace: time.Minute},
		func(context.Context, *bus.Message) error {
			once.Do(func() { close(first) })
			return fmt.Errorf("%w: nats: no response from stream", bus.ErrUnavailable)
		})
	testenv.Receive(t, first, 10*time.Second, "the first run")
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	testenv.Receive(t, stopped, 10*time.Second, "the consumer to stop (its grace is a minute)")
	again := make(chan uint64, 1)
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>"}, func(_ context.Context, m *bus.Message) error {
		select {
		case again <- m.Delivered:
		default:
		}
		return nil
	})
	if d := testenv.Receive(t, again, 10*time.Second, "the message given back to the next worker"); d != 2 {
		t.Errorf("the next worker got delivery %d, want 2", d)
	}
}

// testOtherMajorNotHandled: an envelope written in a format of another major
// version is never given to a handler; it is offered again (a competing
// consumer that reads its format may take it) and, when the deliveries run
// out, becomes a dead letter that names both versions. One of the same major
// is handled.
func testOtherMajorNotHandled(t *testing.T, b *bus.Bus) {
	newer, minor := newEnv("written by a relay of format 2"), newEnv("written by a relay of format 1.4")
	newer.Meta.MCPVersion, minor.Meta.MCPVersion = "2.0.0", "1.4.0"
	publish(t, b, "in.github.issues", newer)
	publish(t, b, "in.github.issues", minor)
	var mu sync.Mutex
	var handled []string
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", MaxDeliver: 2, NakDelays: []time.Duration{50 * time.Millisecond}},
		func(_ context.Context, m *bus.Message) error {
			mu.Lock()
			defer mu.Unlock()
			handled = append(handled, m.Envelope.ID)
			return nil
		})
	dls := waitDLQ(t, b, 1)
	testenv.WaitFor(t, 10*time.Second, "the same major's envelope handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) > 0
	})
	if !strings.Contains(string(dls[0].Envelope), newer.ID) || dls[0].Deliveries != 2 {
		t.Errorf("dead letter of %s after %d deliveries, want %s after 2", dls[0].Envelope, dls[0].Deliveries, newer.ID)
	}
	for _, want := range []string{"max deliveries (2) reached", `meta.mcp_version is "2.0.0", this relay reads 1.x`, "replay the dead letter"} {
		if !strings.Contains(dls[0].Reason, want) {
			t.Errorf("reason %q does not say %q", dls[0].Reason, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(handled, []string{minor.ID}) {
		t.Errorf("handled %v, want only %s (same major)", handled, minor.ID)
	}
}

// testDLQDownKeepsMessage: a message whose dead letter cannot be stored is
// retried, however often that fails, until the dead letter is stored: it is
// never dropped (JetStream's own delivery limit must not end it first).
func testDLQDownKeepsMessage(t *testing.T, b *bus.Bus) {
	if err := b.JetStream().DeleteStream(t.Context(), b.StreamName("dlq")); err != nil {
		t.Fatal(err)
	}
	publish(t, b, "in.github.issues", newEnv("poison while the DLQ is down"))
	var calls atomic.Int32
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", MaxDeliver: 1, NakDelays: []time.Duration{50 * time.Millisecond}},
		func(context.Context, *bus.Message) error {
			calls.Add(1)
			return bus.Permanent(errors.New("bad"))
		})
	testenv.WaitFor(t, 10*time.Second, "the message offered again and again while its dead letter cannot be stored", func() bool {
		info, err := bustest.ConsumerInfo(t.Context(), b, "in.github.issues", "w")
		return err == nil && info.Delivered.Consumer >= 4
	})
	bustest.Connect(t, b) // a process starting re-creates the dead-letter stream
	dls := waitDLQ(t, b, 1)
	if !strings.Contains(dls[0].Reason, "max deliveries 1") {
		t.Errorf("got reason %q, want the deliveries made", dls[0].Reason)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once: past max deliveries the message is only dead-lettered", n)
	}
}

// testPoisonThatKillsItsWorker: a message whose handling never reaches an
// outcome (its worker's process dies each time) is dead-lettered once it has
// been delivered past max deliveries, without being handled again; JetStream,
// which sets no delivery limit, would offer it for ever.
func testPoisonThatKillsItsWorker(t *testing.T, b *bus.Bus) {
	e := newEnv("kills its worker")
	publish(t, b, "in.github.issues", e)
	cfg := bus.ConsumerConfig{Name: "w", Subject: "in.>", MaxDeliver: 2, AckWait: time.Second, Heartbeat: 300 * time.Millisecond, ShutdownGrace: time.Millisecond}
	for range cfg.MaxDeliver {
		crashWorker(t, b, cfg)
	}
	var calls atomic.Int32
	run(t, b, cfg, func(context.Context, *bus.Message) error {
		calls.Add(1)
		return nil
	})
	dls := waitDLQ(t, b, 1)
	if !strings.Contains(string(dls[0].Envelope), e.ID) || !strings.Contains(dls[0].Reason, "without being handled to the end") || dls[0].Deliveries <= 2 {
		t.Errorf("dead letter after %d deliveries (%q), want %s, never handled to the end", dls[0].Deliveries, dls[0].Reason, e.ID)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handled %d times after its deliveries ran out, want 0", n)
	}
}

func testInvalidBody(t *testing.T, b *bus.Bus) {
	// Someone publishes garbage straight to the subject, bypassing Publish.
	if _, err := b.JetStream().Publish(t.Context(), b.Subject("in.github.issues"), []byte(`{"id":"nope"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JetStream().Publish(t.Context(), b.Subject("in.github.issues"), []byte("\x00not json")); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>"}, func(context.Context, *bus.Message) error {
		calls.Add(1)
		return nil
	})
	dls := waitDLQ(t, b, 2)
	if calls.Load() != 0 {
		t.Errorf("handler saw %d invalid messages, want 0", calls.Load())
	}
	if string(dls[0].Envelope) != `{"id":"nope"}` || dls[0].Reason == "" {
		t.Errorf("got first dead letter %s %q, want original body and a reason", dls[0].Envelope, dls[0].Reason)
	}
	if string(dls[1].Raw) != "\x00not json" {
		t.Errorf("got raw %q, want the original bytes", dls[1].Raw)
	}
	// The schema validator gives the reason, whichever path parsed.
	for _, d := range dls {
		if !strings.HasPrefix(d.Reason, "invalid envelope: invalid envelope: ") {
			t.Errorf("got reason %q, want the schema validator's (invalid envelope: ...)", d.Reason)
		}
	}
}

// crashWorker starts a worker of cfg on a connection of its own, which takes
// the next message and dies mid-handler (its connection closes) without an
// outcome.
func crashWorker(t *testing.T, b *bus.Bus, cfg bus.ConsumerConfig) {
	t.Helper()
	crashed := bustest.Connect(t, b)
	took := make(chan struct{})
	stop := run(t, crashed, cfg, func(ctx context.Context, m *bus.Message) error {
		close(took)
		<-ctx.Done()
		return ctx.Err()
	})
	<-took
	crashed.Conn().Close()
	stop()
}

func testRedeliveryAfterCrash(t *testing.T, b *bus.Bus) {
	e := newEnv("crash me")
	publish(t, b, "in.github.issues", e)
	// The first worker takes the message and dies without acking.
	crashWorker(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", AckWait: time.Second, Heartbeat: 300 * time.Millisecond, ShutdownGrace: time.Millisecond})
	got := make(chan *bus.Message, 1)
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", AckWait: time.Second, Heartbeat: 300 * time.Millisecond}, func(_ context.Context, m *bus.Message) error {
		got <- m
		return nil
	})
	if m := testenv.Receive(t, got, 15*time.Second, "the redelivery after the consumer died"); m.Envelope.ID != e.ID || m.Delivered < 2 {
		t.Errorf("got %s delivered %d, want %s delivered >= 2", m.Envelope.ID, m.Delivered, e.ID)
	}
}

func testReplay(t *testing.T, b *bus.Bus) {
	e := newEnv("replay me")
	publish(t, b, "in.github.issues", e)
	var fixed atomic.Bool
	var agentCalls, memoryCalls atomic.Int32
	run(t, b, bus.ConsumerConfig{Name: "memory", Subject: "in.>"}, func(context.Context, *bus.Message) error {
		memoryCalls.Add(1)
		return nil
	})
	run(t, b, bus.ConsumerConfig{Name: "agent", Subject: "in.>"}, func(context.Context, *bus.Message) error {
		agentCalls.Add(1)
		if !fixed.Load() {
			return bus.Permanent(errors.New("llm config broken"))
		}
		return nil
	})
	dls := waitDLQ(t, b, 1)
	fixed.Store(true)
	res, err := b.Replay(t.Context(), dls[0].Seq)
	if err != nil || res.Duplicate {
		t.Fatalf("replay: %v (duplicate %v)", err, res.Duplicate)
	}
	testenv.WaitFor(t, 10*time.Second, "agent handles the replay", func() bool { return agentCalls.Load() == 2 })
	assertDLQ(t, b, 0)
	time.Sleep(300 * time.Millisecond)
	if n := memoryCalls.Load(); n != 1 {
		t.Errorf("memory consumer handled %d messages, want 1 (replay is for the agent only)", n)
	}
	_, err = b.Replay(t.Context(), dls[0].Seq)
	if !errors.Is(err, jetstream.ErrMsgNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("no dead letter %d", dls[0].Seq)) {
		t.Errorf("replaying a removed dead letter: %v, want an error saying there is no such dead letter", err)
	}
}

func testCompeting(t *testing.T, b *bus.Bus) {
	const n = 40
	for i := range n {
		publish(t, b, "tool.call", newEnv(fmt.Sprint(i)))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	per := [2]atomic.Int32{}
	for i := range 2 {
		peer := bustest.Connect(t, b)
		run(t, peer, bus.ConsumerConfig{Name: "toolrunner", Subject: "tool.call"}, func(_ context.Context, m *bus.Message) error {
			mu.Lock()
			seen[m.Envelope.ID]++
			mu.Unlock()
			per[i].Add(1)
			time.Sleep(5 * time.Millisecond)
			return nil
		})
	}
	testenv.WaitFor(t, 15*time.Second, "all messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == n })
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		if c != 1 {
			t.Errorf("envelope %s handled %d times, want once", id, c)
		}
	}
	if per[0].Load() == 0 || per[1].Load() == 0 {
		t.Errorf("got split %d/%d, want both instances to share the work", per[0].Load(), per[1].Load())
	}
}

func testFanOut(t *testing.T, b *bus.Bus) {
	publish(t, b, "in.slack.app_mention", newEnv("to everyone"))
	var agent, memory atomic.Int32
	run(t, b, bus.ConsumerConfig{Name: "agent", Subject: "in.>"}, func(context.Context, *bus.Message) error { agent.Add(1); return nil })
	run(t, b, bus.ConsumerConfig{Name: "memory", Subject: "in.>"}, func(context.Context, *bus.Message) error { memory.Add(1); return nil })
	testenv.WaitFor(t, 10*time.Second, "both worker types", func() bool { return agent.Load() == 1 && memory.Load() == 1 })
}

func testHeartbeat(t *testing.T, b *bus.Bus) {
	publish(t, b, "tool.call", newEnv("slow"))
	var calls atomic.Int32
	done := make(chan struct{})
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "tool.call", AckWait: 500 * time.Millisecond, Heartbeat: 100 * time.Millisecond},
		func(context.Context, *bus.Message) error {
			if calls.Add(1) == 1 {
				time.Sleep(1500 * time.Millisecond) // three ack waits
				close(done)
			}
			return nil
		})
	<-done
	time.Sleep(700 * time.Millisecond)
	if c := calls.Load(); c != 1 {
		t.Errorf("handler called %d times, want 1 (heartbeats prevent redelivery)", c)
	}
}

// testConcurrentHandlers: a consumer of concurrency n runs n handlers at
// once, and each delivery's slot comes back when it is done.
func testConcurrentHandlers(t *testing.T, b *bus.Bus) {
	const n = 4
	for i := range 2 * n {
		publish(t, b, "in.github.issues", newEnv(fmt.Sprintf("at once %d", i)))
	}
	var inside, done atomic.Int32
	release := make(chan struct{})
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", Concurrency: n}, func(ctx context.Context, _ *bus.Message) error {
		if inside.Add(1) <= n {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		done.Add(1)
		return nil
	})
	testenv.WaitFor(t, 10*time.Second, "n handlers at once", func() bool { return inside.Load() == n })
	if got := inside.Load(); got != n {
		t.Fatalf("got %d handlers in, want %d while none has returned", got, n)
	}
	close(release)
	testenv.WaitFor(t, 10*time.Second, "every delivery handled", func() bool { return done.Load() == 2*n })
}

func testShutdownDrains(t *testing.T, b *bus.Bus) {
	publish(t, b, "tool.call", newEnv("in flight"))
	started := make(chan struct{})
	var finished atomic.Bool
	stop := run(t, b, bus.ConsumerConfig{Name: "w", Subject: "tool.call"}, func(ctx context.Context, m *bus.Message) error {
		close(started)
		time.Sleep(300 * time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		finished.Store(true)
		return nil
	})
	<-started
	stop() // returns only after the in-flight handler finished
	if !finished.Load() {
		t.Fatal("Consume returned before the in-flight handler finished")
	}
	bustest.WaitDrained(t, b, "tool.call", "w", 5*time.Second) // the ack recorded
}

var _ = nats.ErrTimeout

// testDeliverNewFromStartUp: a new DeliverNew consumer skips what was stored
// before its process opened the bus, but not what was stored while the
// process was starting (before the consumer existed); started again, it goes
// on where it was.
func testDeliverNewFromStartUp(t *testing.T, b *bus.Bus) {
	publish(t, b, "in.github.issues", newEnv("history"))
	started := bustest.Connect(t, b) // a process starting, after the history
	publish(t, b, "in.github.issues", newEnv("during start-up"))
	seen := make(chan string, 10)
	var once sync.Map // envelope ids handled: a redelivery is not news
	h := func(_ context.Context, m *bus.Message) error {
		if _, again := once.LoadOrStore(m.Envelope.ID, true); !again {
			seen <- m.Envelope.Content
		}
		return nil
	}
	// A short ack wait: a message the server hands to the stopped worker's
	// last pull request (its connection stays open here) comes back soon.
	cfg := bus.ConsumerConfig{Name: "new", Subject: "in.>", DeliverNew: true, AckWait: time.Second, Heartbeat: 300 * time.Millisecond}
	stop := run(t, started, cfg, h)
	publish(t, b, "in.github.issues", newEnv("after start-up"))
	// want waits for contents to be handled, in any order: handlers run
	// concurrently.
	want := func(contents ...string) {
		t.Helper()
		var got []string
		for range contents {
			select {
			case c := <-seen:
				got = append(got, c)
			case <-time.After(10 * time.Second):
				t.Fatalf("handled %q, want %q", got, contents)
			}
		}
		slices.Sort(got)
		if w := slices.Sorted(slices.Values(contents)); !slices.Equal(got, w) {
			t.Fatalf("handled %q, want %q", got, w)
		}
	}
	want("during start-up", "after start-up")
	stop()
	publish(t, b, "in.github.issues", newEnv("while stopped"))
	run(t, bustest.Connect(t, b), cfg, h) // the consumer exists: its start stays
	publish(t, b, "in.github.issues", newEnv("after restart"))
	want("while stopped", "after restart")
	select {
	case got := <-seen:
		t.Errorf("handled %q as well", got)
	case <-time.After(200 * time.Millisecond):
	}
}
