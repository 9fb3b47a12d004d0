package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/secret"
)

// startedNATS starts a server and connects a bus with prefix to it, closed
// when the test ends.
func startedNATS(t *testing.T, prefix string) (*bustest.Restartable, *bus.Bus) {
	t.Helper()
	ns := bustest.NewRestartable(t, server.Options{})
	ns.Start()
	b, err := bus.Connect(t.Context(), bus.Config{URL: ns.URL(), Prefix: prefix, Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return ns, b
}

// A process started while NATS is down does not exit: it is not ready, then
// connects and serves once the server comes up.
func TestStartsBeforeServer(t *testing.T) {
	t.Parallel()
	ns := bustest.NewRestartable(t, server.Options{})
	b, err := bus.Open(bus.Config{URL: ns.URL(), Prefix: "wait", Name: t.Name()})
	if err != nil {
		t.Fatalf("Open with the server down: got %v, want a bus that waits", err)
	}
	t.Cleanup(b.Close)
	if err := b.Ready(t.Context()); !errors.Is(err, bus.ErrNotConnected) {
		t.Fatalf("Ready with the server down: got %v, want ErrNotConnected", err)
	}
	if err := b.Alive(); err != nil {
		t.Fatalf("Alive while waiting: got %v, want nil", err)
	}
	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := b.WaitReady(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady with the server down: got %v, want a deadline error", err)
	}

	ns.Start()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if err := b.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady after the server started: %v", err)
	}
	if err := b.Ready(t.Context()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	publish(t, b, "in.github.issues", newEnv("hello"))
}

// Operator commands fail at once instead of waiting for a server.
func TestFailFast(t *testing.T) {
	t.Parallel()
	ns := bustest.NewRestartable(t, server.Options{})
	start := time.Now()
	_, err := bus.Connect(t.Context(), bus.Config{URL: "nats://u:hunter2@" + ns.Addr(), FailFast: true})
	if err == nil {
		t.Fatal("got nil, want an error with no server")
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %s; want an immediate error", time.Since(start))
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %q shows the password", err)
	}
}

// NATS restarted under load: every publish that was acknowledged is
// consumed, publishing resumes after the restart, and the streams are there
// again (ensured after the reconnect even when the server lost them).
func TestServerRestartUnderLoad(t *testing.T) {
	t.Parallel()
	ns, b := startedNATS(t, "restart")

	var mu sync.Mutex
	acked, seen := map[string]bool{}, map[string]bool{}
	run(t, b, bus.ConsumerConfig{Name: "w", Subject: "in.>", Concurrency: 4, AckWait: 2 * time.Second, Heartbeat: 500 * time.Millisecond}, func(_ context.Context, m *bus.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m.Header.Get("Nats-Msg-Id")] = true
		return nil
	})

	// The publisher retries each message with its delivery id until it is
	// acknowledged, as a provider retries a 503.
	ctx, stop := context.WithCancel(t.Context())
	var published, failures atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("d-%d", i)
			for ctx.Err() == nil {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := b.Publish(pctx, "in.github.issues", newEnv(id), bus.WithMsgID(id))
				cancel()
				if err == nil {
					mu.Lock()
					acked[id] = true
					mu.Unlock()
					published.Add(1)
					break
				}
				failures.Add(1)
				time.Sleep(20 * time.Millisecond) // pace the retries of one message
			}
		}
	}()
	testenv.WaitFor(t, 10*time.Second, "publishing before the restart", func() bool { return published.Load() >= 200 })
	ns.Stop()
	testenv.WaitFor(t, 10*time.Second, "the bus to notice", func() bool { return b.Ready(t.Context()) != nil })
	before := published.Load()
	ns.Start()
	testenv.WaitFor(t, 20*time.Second, "publishing after the restart", func() bool { return published.Load() >= before+200 })
	stop()
	<-done
	if err := b.Alive(); err != nil {
		t.Fatalf("Alive after the restart: %v", err)
	}
	testenv.WaitFor(t, 20*time.Second, "every acknowledged publish consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range acked {
			if !seen[id] {
				return false
			}
		}
		return true
	})
	t.Logf("published %d, failed attempts while the server was down %d", published.Load(), failures.Load())
}

// A subject NATS would refuse is never sent: one long token from a request
// cannot end the connection.
func TestLongSubjectRefused(t *testing.T) {
	t.Parallel()
	_, b := startedNATS(t, "long")
	for name, subj := range map[string]string{
		"4 KiB token": "in.sentry." + strings.Repeat("x", 4096),
		"empty token": "in..x",
		"wildcard":    "in.*.x",
		"blank":       "in.a b",
	} {
		if _, err := b.Publish(t.Context(), subj, newEnv("x")); !errors.Is(err, bus.ErrInvalidSubject) {
			t.Errorf("%s: got %v, want ErrInvalidSubject", name, err)
		}
	}
	// Through the envelope's subject builder the same input is capped.
	publish(t, b, envelope.Inbound(envelope.ChannelSentry, strings.Repeat("x", 4096)), newEnv("x"))
	if err := b.Ready(t.Context()); err != nil {
		t.Fatalf("Ready after hostile subjects: %v", err)
	}
}

// When nats.go gives the connection up for good (here: a raw publish over the
// server's control-line limit), Alive and Ready report it so that a liveness
// probe restarts the process.
func TestAliveReportsLostConnection(t *testing.T) {
	t.Parallel()
	_, b := startedNATS(t, "lost")
	if err := b.Alive(); err != nil {
		t.Fatalf("Alive: %v", err)
	}
	_ = b.Conn().Publish("lost."+strings.Repeat("x", 8192), nil)
	_ = b.Conn().Flush()
	testenv.WaitFor(t, 10*time.Second, "Alive to fail", func() bool { return b.Alive() != nil })
	if err := b.Ready(t.Context()); err == nil {
		t.Error("Ready: got nil after the connection was lost")
	}
	select {
	case <-b.Lost():
	case <-time.After(10 * time.Second):
		t.Error("Lost not closed after the connection was lost")
	}
}

// Close is not a loss: Lost stays open and Alive nil.
func TestCloseIsNotLoss(t *testing.T) {
	t.Parallel()
	b, err := bus.Connect(t.Context(), bus.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	select {
	case <-b.Lost():
		t.Error("Lost closed by Close")
	default:
	}
	if err := b.Alive(); err != nil {
		t.Errorf("Alive after Close: got %v, want nil", err)
	}
}

// With a token the embedded server refuses clients without it; the bus and
// peers that present it work.
func TestEmbeddedToken(t *testing.T) {
	t.Parallel()
	tok := secret.New("s3cret-token")
	b, err := bus.Connect(t.Context(), bus.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Token: tok, Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	publish(t, b, "in.github.issues", newEnv("x"))
	if nc, err := nats.Connect(b.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("a client without the token connected to the embedded server")
	}
	if strings.Contains(b.ClientURL(), "s3cret") {
		t.Errorf("ClientURL %q carries the token", b.ClientURL())
	}
	peer, err := bus.Connect(t.Context(), bus.Config{URL: b.ClientURL(), Token: tok, FailFast: true, Name: t.Name() + "-peer"})
	if err != nil {
		t.Fatalf("peer with the token: %v", err)
	}
	defer peer.Close()
	publish(t, peer, "in.github.issues", newEnv("y"))
	wrong, err := bus.Connect(t.Context(), bus.Config{URL: b.ClientURL(), Token: secret.New("wrong"), FailFast: true})
	if err == nil {
		wrong.Close()
		t.Fatal("a peer with a wrong token connected")
	}
}
