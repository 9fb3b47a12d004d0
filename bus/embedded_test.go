package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
)

// A restart of the embedded server on the same data directory loses nothing:
// unconsumed messages are still there, acknowledged ones are not redelivered,
// and the duplicate window still remembers delivery ids.
func TestEmbeddedRestartKeepsMessages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := bustest.Embedded(t, bustest.WithDataDir(dir))
	var ids []string
	for i := range 10 {
		e := newEnv("persist me")
		ids = append(ids, e.ID)
		publish(t, first, "in.github.issues", e, bus.WithMsgID("delivery-"+string(rune('a'+i))))
	}
	// Consume and ack the first three before the restart.
	var mu sync.Mutex
	seen := map[string]bool{}
	// Short nak delays: the restarted server honours a pending nak delay.
	stop := run(t, first, bus.ConsumerConfig{Name: "agent", Subject: "in.>", Concurrency: 1, MaxDeliver: 100, AckWait: 2 * time.Second, Heartbeat: 500 * time.Millisecond, NakDelays: []time.Duration{100 * time.Millisecond}}, func(_ context.Context, m *bus.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) >= 3 {
			return errors.New("not now") // leave the rest unacknowledged
		}
		seen[m.Envelope.ID] = true
		return nil
	})
	testenv.WaitFor(t, 10*time.Second, "three acks", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 3 })
	stop()
	first.Close()

	second := bustest.Embedded(t, bustest.WithDataDir(dir))
	res := publish(t, second, "in.github.issues", newEnv("retry"), bus.WithMsgID("delivery-a"))
	if !res.Duplicate {
		t.Error("duplicate window forgot a delivery id across the restart")
	}
	after := map[string]bool{}
	// Same ack wait as before the restart: deliveries pending at the restart
	// come back after it.
	run(t, second, bus.ConsumerConfig{Name: "agent", Subject: "in.>", AckWait: 2 * time.Second, Heartbeat: 500 * time.Millisecond}, func(_ context.Context, m *bus.Message) error {
		mu.Lock()
		defer mu.Unlock()
		after[m.Envelope.ID] = true
		return nil
	})
	testenv.WaitFor(t, 15*time.Second, "the seven unacknowledged messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(after) == 7 })
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if seen[id] == after[id] {
			t.Errorf("envelope %s: acked before restart %v, delivered after %v; want exactly one", id, seen[id], after[id])
		}
	}
}

func TestEmbeddedListenInUse(t *testing.T) {
	t.Parallel()
	l := testenv.Listen(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := bus.Connect(ctx, bus.Config{DataDir: t.TempDir(), Listen: l.Addr().String()})
	if !errors.Is(err, bus.ErrListenInUse) {
		t.Fatalf("got %v, want ErrListenInUse", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("took %s to report a taken port; want an immediate error", time.Since(start))
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]bus.Config{
		"bad prefix":   {Prefix: "relay.x"},
		"short window": {DuplicateWindow: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := bus.Connect(t.Context(), cfg); err == nil {
				t.Fatal("got nil, want a configuration error")
			}
		})
	}
	b := bustest.Embedded(t)
	for name, cc := range map[string]bus.ConsumerConfig{
		"no name":          {Subject: "in.>"},
		"no subject":       {Name: "x"},
		"no stream":        {Name: "x", Subject: "elsewhere.>"},
		"heartbeat >= ack": {Name: "x", Subject: "in.>", AckWait: time.Second, Heartbeat: 2 * time.Second},
	} {
		if err := b.Consume(t.Context(), cc, bus.HandlerFunc(func(context.Context, *bus.Message) error { return nil })); err == nil {
			t.Errorf("%s: Consume accepted %+v", name, cc)
		}
	}
}

func TestPublishUnavailable(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	peer := bustest.Connect(t, b)
	b.Close() // the server is gone; the peer cannot reach JetStream
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err := peer.Publish(ctx, "in.github.issues", envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "x"))
	if !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable (the edge answers 503)", err)
	}
	if err := peer.Ready(t.Context()); err == nil {
		t.Error("Ready reported nil with the server down")
	}
}
