package bus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
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

// TestPublishStalledServer puts a server that stops answering for a while
// (a TCP relay that holds back everything the server sends, acks included)
// under many concurrent async publishers: none fails with the client's
// "stalled with too many outstanding async published messages" error,
// although the stall outlasts the client's stall wait several times; they
// wait, and every message is stored once when the server answers again. A
// synchronous publish during the stall ends with the bus's own error.
func TestPublishStalledServer(t *testing.T) {
	t.Parallel()
	srv := bustest.Embedded(t)
	relay := newStallRelay(t, srv.ClientURL())
	const pending = 16
	b, err := bus.Connect(t.Context(), bus.Config{URL: relay.url, Name: t.Name(), MaxAsyncPending: pending})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	relay.hold()
	const writers, each = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := b.PublishAsync(t.Context(), "in.github.issues", newEnv(fmt.Sprintf("stall-%d-%d", w, i))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	testenv.WaitFor(t, 10*time.Second, "every async slot taken", func() bool {
		return b.JetStream().PublishAsyncPending() == pending
	})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	_, err = b.Publish(ctx, "in.github.issues", newEnv("sync-during-stall"))
	cancel()
	if !errors.Is(err, bus.ErrUnavailable) {
		t.Errorf("sync publish during the stall: got %v, want an error wrapping ErrUnavailable", err)
	}
	// The stall itself: the server stays silent for four times the client's
	// own stall wait (200ms) before it answers again.
	<-time.After(800 * time.Millisecond)
	relay.release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("PublishAsync against a stalled server: %v", err)
	}
	select {
	case <-b.PublishAsyncComplete():
	case <-time.After(20 * time.Second):
		t.Fatalf("%d async publishes still unacknowledged", b.JetStream().PublishAsyncPending())
	}
	info, err := srv.JetStream().Stream(t.Context(), srv.StreamName("in.github.issues"))
	if err != nil {
		t.Fatal(err)
	}
	// The sync publish reached the server too; only its ack came late.
	if got := info.CachedInfo().State.Msgs; got != writers*each+1 {
		t.Fatalf("stream holds %d messages, want %d", got, writers*each+1)
	}
}

// stallRelay is a TCP relay in front of a NATS server that can hold back
// what the server sends (the client's writes still go through).
type stallRelay struct {
	url  string
	gate sync.RWMutex // write-locked while the server's bytes are held
}

func newStallRelay(t *testing.T, target string) *stallRelay {
	t.Helper()
	ln := testenv.Listen(t)
	r := &stallRelay{url: "nats://" + ln.Addr().String()}
	addr := strings.TrimPrefix(target, "nats://")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			go func() { _, _ = io.Copy(s, c) }()
			go r.copyHeld(c, s)
		}
	}()
	return r
}

// copyHeld copies from the server to the client, waiting while held.
func (r *stallRelay) copyHeld(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.gate.RLock()
			_, werr := dst.Write(buf[:n])
			r.gate.RUnlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *stallRelay) hold()    { r.gate.Lock() }
func (r *stallRelay) release() { r.gate.Unlock() }

// TestPublishConcurrentBodiesIntact: synchronous publishes reuse their body
// buffers; from several goroutines at once, every stored message still
// holds the very bytes of its own envelope.
func TestPublishConcurrentBodiesIntact(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	const writers, each = 6, 40
	want := make(map[uint64][]byte, writers*each)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e := newEnv(strings.Repeat(fmt.Sprintf("writer %d message %d; ", w, i), 1+(w*each+i)%40))
				body, err := e.Marshal()
				if err != nil {
					errs <- err
					return
				}
				res, err := b.Publish(t.Context(), "in.github.issues", e)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				want[res.Sequence] = body
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Publish: %v", err)
	}
	stream, err := b.JetStream().Stream(t.Context(), b.StreamName("in.github.issues"))
	if err != nil {
		t.Fatal(err)
	}
	for seq, body := range want {
		m, err := stream.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		if string(m.Data) != string(body) {
			t.Fatalf("message %d: got body %.80q..., want %.80q...", seq, m.Data, body)
		}
	}
}

// TestRequestsEndAtRequestTimeout holds back every reply of the server, as
// when a request was written to a server that stopped before answering it
// (nats.go does not fail such a request when it reconnects): a publish and
// each request of a bucket opened through the bus end at the bus's
// RequestTimeout (a bucket's after its retries for RetryFor), although the caller's own deadline is much later. A
// handler's one-minute deadline must not keep its delivery in progress for
// a minute after the server is back.
func TestRequestsEndAtRequestTimeout(t *testing.T) {
	t.Parallel()
	srv := bustest.Embedded(t)
	relay := newStallRelay(t, srv.ClientURL())
	b, err := bus.Connect(t.Context(), bus.Config{URL: relay.url, Name: t.Name(), RequestTimeout: 200 * time.Millisecond, RetryFor: 700 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	kv, err := b.OpenBucket(t.Context(), "held", "replies held back", 0)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(t.Context(), "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}

	relay.hold()
	defer relay.release()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, r := range []struct {
		name string
		do   func() error
	}{
		{"publish", func() error { _, err := b.Publish(ctx, "in.github.issues", newEnv("held")); return err }},
		{"get", func() error { _, err := kv.Get(ctx, "k"); return err }},
		{"get revision", func() error { _, err := kv.GetRevision(ctx, "k", rev); return err }},
		{"put", func() error { _, err := kv.Put(ctx, "k", []byte("2")); return err }},
		{"update", func() error { _, err := kv.Update(ctx, "k", []byte("2"), rev); return err }},
		{"create", func() error { _, err := kv.Create(ctx, "new", []byte("1")); return err }},
		{"delete", func() error { return kv.Delete(ctx, "k") }},
		{"purge", func() error { return kv.Purge(ctx, "k") }},
		{"status", func() error { _, err := kv.Status(ctx); return err }},
	} {
		err := r.do()
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, bus.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("%s with the replies held back: got %v (the caller's context: %v); want the request's own timeout "+
				"after the bus's retries (bus unavailable), the caller's context still live", r.name, err, ctx.Err())
		}
	}
}
