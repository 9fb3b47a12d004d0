package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
)

// TestPublishAsyncBackpressure keeps far more async publishes in flight than
// the tiny MaxAsyncPending allows, from several goroutines: each waits for a
// free slot instead of failing with the client's "stalled" error, and every
// message is stored once.
func TestPublishAsyncBackpressure(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t, func(c *bus.Config) { c.MaxAsyncPending = 2 })
	const writers, each = 8, 250
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	var mu sync.Mutex
	var futures []jetstream.PubAckFuture
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				f, err := b.PublishAsync(t.Context(), "in.github.issues", newEnv(fmt.Sprintf("w%d-%d", w, i)))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				futures = append(futures, f)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("PublishAsync under back-pressure: %v", err)
	}
	seqs := map[uint64]bool{}
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[ack.Sequence] = true
		case err := <-f.Err():
			t.Fatalf("publish future: %v", err)
		case <-t.Context().Done():
			t.Fatal("test ended before every ack arrived")
		}
	}
	if len(seqs) != writers*each {
		t.Fatalf("got %d distinct stored sequences, want %d", len(seqs), writers*each)
	}
	info, err := b.JetStream().Stream(t.Context(), b.StreamName("in.github.issues"))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != writers*each {
		t.Fatalf("stream holds %d messages, want %d", got, writers*each)
	}
}

// TestPublishAsyncBackpressureBounded: when no ack frees a slot, the wait ends
// with ctx, as an error that says so (ErrUnavailable and the context's error),
// not as "stalled with too many outstanding async published messages".
func TestPublishAsyncBackpressureBounded(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t, func(c *bus.Config) { c.MaxAsyncPending = 1 })
	// Without its stream nobody acks: the one slot stays taken while the
	// client retries the first publish.
	if err := b.DeleteStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishAsync(t.Context(), "in.github.issues", newEnv("first")); err != nil {
		t.Fatalf("first PublishAsync: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := b.PublishAsync(ctx, "in.github.issues", newEnv("second"))
	if !errors.Is(err, bus.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want an error wrapping ErrUnavailable and context.DeadlineExceeded", err)
	}
	if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
		t.Fatalf("got the client's stalled error %v, want the bus's own", err)
	}
}
