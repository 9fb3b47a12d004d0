// Package bustest starts buses for tests: an in-process JetStream server with
// file storage in a temporary directory, or the machine's NATS server
// (NATS_URL) under a unique subject prefix so parallel suites never collide.
package bustest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
)

// Option adjusts the bus configuration of a test bus.
type Option func(*bus.Config)

// WithDataDir stores the embedded server's files in dir (to restart on them).
func WithDataDir(dir string) Option { return func(c *bus.Config) { c.DataDir = dir } }

// WithLogger logs the bus to l.
func WithLogger(l *slog.Logger) Option { return func(c *bus.Config) { c.Logger = l } }

// WithMetrics records bus metrics in m.
func WithMetrics(m *bus.Metrics) Option { return func(c *bus.Config) { c.Metrics = m } }

// Embedded returns a bus on a fresh in-process NATS server with JetStream,
// listening on a random loopback port and storing under t.TempDir(). It is
// closed when the test ends.
func Embedded(t testing.TB, opts ...Option) *bus.Bus {
	t.Helper()
	b, err := connect(bus.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: t.Name(), Logger: testLogger()}, opts)
	if err != nil {
		t.Fatalf("start embedded bus: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// External returns a bus on the NATS server named by NATS_URL (CI sets it to
// the machine's server), under a random prefix. When the test ends every
// stream of the prefix is deleted, the bus's own and the key-value buckets
// and object stores the test's services created ("{prefix}_approvals"), and
// the test fails if any is left. Without NATS_URL it skips, or fails in CI.
func External(t testing.TB, opts ...Option) *bus.Bus {
	t.Helper()
	url := os.Getenv("NATS_URL")
	if url == "" {
		testenv.Missing(t, "NATS_URL is not set; start nats-server -js and set NATS_URL=nats://127.0.0.1:4222")
	}
	b, err := connect(bus.Config{URL: url, Prefix: RandomPrefix(), Name: t.Name(), Logger: testLogger()}, opts)
	if err != nil {
		testenv.Missing(t, "NATS at %s: %v", url, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		defer b.Close()
		if _, err := DeletePrefix(ctx, b.JetStream(), b.Prefix()); err != nil {
			t.Errorf("cleanup of prefix %s: %v", b.Prefix(), err)
			return
		}
		left, err := Streams(ctx, b.JetStream(), b.Prefix())
		if err != nil {
			t.Errorf("list streams of prefix %s: %v", b.Prefix(), err)
		}
		if len(left) > 0 {
			t.Errorf("streams of prefix %s left behind on %s: %s", b.Prefix(), url, strings.Join(left, ", "))
		}
	})
	return b
}

// connect applies opts to cfg and connects, giving up after 20 seconds.
func connect(cfg bus.Config, opts []Option) (*bus.Bus, error) {
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return bus.Connect(ctx, cfg)
}

// testLogger logs the bus to stderr when RELAY_TEST_LOG is set (debug with
// RELAY_TEST_LOG=debug), and discards otherwise.
func testLogger() *slog.Logger {
	switch os.Getenv("RELAY_TEST_LOG") {
	case "":
		return nil
	case "debug":
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// Streams returns the names of the streams of prefix (a RandomPrefix): the
// bus's ("{PREFIX}_IN"), and those of the key-value buckets and object stores
// named after it ("KV_{prefix}_approvals", "OBJ_{prefix}_..."). A random
// prefix occurs in no other name.
func Streams(ctx context.Context, js jetstream.JetStream, prefix string) ([]string, error) {
	p := strings.ToLower(prefix)
	var out []string
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		if strings.Contains(strings.ToLower(n), p) {
			out = append(out, n)
		}
	}
	return out, names.Err()
}

// DeletePrefix deletes every stream of prefix (Streams) and returns their
// names.
func DeletePrefix(ctx context.Context, js jetstream.JetStream, prefix string) ([]string, error) {
	names, err := Streams(ctx, js, prefix)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if err := js.DeleteStream(ctx, n); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("delete stream %s: %w", n, err)
		}
	}
	return names, nil
}

// RandomPrefix returns a subject prefix unique to this call.
func RandomPrefix() string {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return "t" + hex.EncodeToString(r[:])
}

// Connect returns another connection to b's server with b's prefix, as a
// second process would open; it is closed when the test ends.
func Connect(t testing.TB, b *bus.Bus) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := bus.Connect(ctx, bus.Config{URL: b.ClientURL(), Prefix: b.Prefix(), Name: t.Name() + "-peer"})
	if err != nil {
		t.Fatalf("connect second client to %s: %v", b.ClientURL(), err)
	}
	t.Cleanup(o.Close)
	return o
}

// Observe consumes the relative subject with a durable consumer named name
// and sends every envelope to the returned channel (which buffers 64) until
// the test ends.
func Observe(t testing.TB, b *bus.Bus, name, subject string) <-chan *envelope.Envelope {
	t.Helper()
	ch := make(chan *envelope.Envelope, 64)
	testenv.Go(t, "observe "+subject, func(ctx context.Context) error {
		return b.Consume(ctx, bus.ConsumerConfig{Name: name, Subject: subject, ShutdownGrace: time.Second},
			bus.HandlerFunc(func(_ context.Context, m *bus.Message) error {
				ch <- m.Envelope
				return nil
			}))
	})
	return ch
}

// Request sends an empty request to subj on nc and decodes the JSON answer
// into a T (a $SRV discovery answer, say), failing the test when there is
// none within 10 seconds or it does not decode.
func Request[T any](t testing.TB, nc *nats.Conn, subj string) T {
	t.Helper()
	msg, err := nc.Request(subj, nil, 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subj, err)
	}
	var v T
	if err := json.Unmarshal(msg.Data, &v); err != nil {
		t.Fatalf("decode %s: %v", subj, err)
	}
	return v
}

// ConsumerInfo reads the state of the durable consumer name on the stream that
// holds the relative subject.
func ConsumerInfo(ctx context.Context, b *bus.Bus, subject, name string) (*jetstream.ConsumerInfo, error) {
	c, err := b.JetStream().Consumer(ctx, b.StreamName(subject), name)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// WaitConsumer waits up to within until the durable consumer name exists on
// the stream that holds the relative subject: a worker's consumer that starts
// at new messages misses what is published before.
func WaitConsumer(t testing.TB, b *bus.Bus, subject, name string, within time.Duration) {
	t.Helper()
	testenv.WaitFor(t, within, "consumer "+name, func() bool {
		_, err := b.JetStream().Consumer(t.Context(), b.StreamName(subject), name)
		return err == nil
	})
}

// WaitDrained waits up to within until the durable consumer name on the stream
// that holds the relative subject has handled every message of its filter that
// the stream held when it was called (see Drained).
func WaitDrained(t testing.TB, b *bus.Bus, subject, name string, within time.Duration) {
	t.Helper()
	testenv.WaitFor(t, within, "consumer "+name+" drained", func() bool {
		ok, err := Drained(t.Context(), b, b.StreamName(subject), name)
		return err == nil && ok
	})
}

// Drained reports whether the durable consumer name on stream has acked every
// message of its filter the stream holds (bus.CaughtUp: exact, unlike the
// consumer's pending count just after a publish).
func Drained(ctx context.Context, b *bus.Bus, stream, name string) (bool, error) {
	c, err := b.JetStream().Consumer(ctx, stream, name)
	if err != nil {
		return false, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, err
	}
	return bus.CaughtUp(ctx, b.JetStream(), info)
}
