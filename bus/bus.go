// Package bus is the relay's JetStream message bus: it connects to NATS (or
// starts an embedded server), keeps the relay's streams in place, publishes
// validated envelopes with de-duplication ids, and consumes them with explicit
// outcomes (ack, nak with delay, term plus dead letter).
//
// Subjects given to the bus are relative to its prefix ("relay" by default), so
// Publish(ctx, "in.github.issues", e) writes to relay.in.github.issues. The
// prefix lets several relays, or parallel test suites, share one NATS server.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/envelope"
)

// Config says where the bus lives. The zero value starts an embedded server
// under ./data listening on 127.0.0.1:4222.
type Config struct {
	// URL of an external NATS server (NATS_URL). Empty starts an embedded one.
	URL string
	// DataDir is the embedded server's state directory (RELAY_DATA_DIR); its
	// JetStream files live in DataDir/nats. Default "./data".
	DataDir string
	// Listen is the embedded server's client address (RELAY_NATS_LISTEN), so
	// other processes can attach. Default "127.0.0.1:4222"; port 0 picks one.
	Listen string
	// Prefix is the first token of every subject and of stream names. Default "relay".
	Prefix string
	// Name is the NATS connection name, shown in server monitoring.
	Name string
	// Retention is how long inbound and work messages are kept. Default 7 days.
	Retention time.Duration
	// DeadLetterRetention is how long dead letters are kept. Default 30 days.
	DeadLetterRetention time.Duration
	// DuplicateWindow is JetStream's de-duplication window for Nats-Msg-Id.
	// Default 15 minutes; at least 10 minutes, which covers Slack's and
	// GitHub's retry schedules.
	DuplicateWindow time.Duration
	// PublishTimeout bounds Publish when the caller's context has no deadline.
	// Default 5s.
	PublishTimeout time.Duration
	// MaxAsyncPending bounds PublishAsync's unacknowledged publishes. Default 256.
	MaxAsyncPending int
	// Metrics, when set, records publish and consume counts and latencies.
	Metrics *Metrics
	// Logger; nil discards.
	Logger *slog.Logger
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:4222"
	}
	if c.Prefix == "" {
		c.Prefix = "relay"
	}
	if c.Name == "" {
		c.Name = "relay"
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.DeadLetterRetention == 0 {
		c.DeadLetterRetention = 30 * 24 * time.Hour
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 15 * time.Minute
	}
	if c.MaxAsyncPending == 0 {
		c.MaxAsyncPending = 256
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a configuration the bus cannot run with.
func (c *Config) Validate() error {
	if !prefixRE.MatchString(c.Prefix) {
		return fmt.Errorf("bus prefix %q: want letters, digits, '-' or '_'", c.Prefix)
	}
	if c.DuplicateWindow < 10*time.Minute {
		return fmt.Errorf("bus duplicate window %s: must be at least 10m to cover provider retries", c.DuplicateWindow)
	}
	return nil
}

// Bus is a connection to JetStream with the relay's streams in place. It is
// safe for concurrent use. Close releases it (and stops an embedded server).
type Bus struct {
	cfg      Config
	log      *slog.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	embedded *server.Server
	metrics  *Metrics
	names    streamNames
}

// Connect connects to cfg.URL, or starts the embedded server when it is empty,
// and creates or updates the relay's streams. The caller must Close the Bus.
func Connect(ctx context.Context, cfg Config) (*Bus, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Bus{cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics, names: newStreamNames(cfg.Prefix)}
	url := cfg.URL
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				b.log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { b.log.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
	}
	if url == "" {
		ns, err := startEmbedded(cfg.DataDir, cfg.Listen, b.log)
		if err != nil {
			return nil, err
		}
		b.embedded = ns
		// Connect over loopback TCP rather than nats.InProcessServer: the
		// in-process pipe is unbuffered, so a briefly busy reader blocks the
		// server's writes and trips its slow-consumer cut-off.
		url = ns.ClientURL()
		b.log.Info("embedded nats started", "listen", url, "store", cfg.DataDir)
	} else {
		opts = append(opts, nats.RetryOnFailedConnect(false), nats.Timeout(5*time.Second))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		b.shutdownEmbedded()
		return nil, fmt.Errorf("connect to nats %s: %w", redactURL(url), err)
	}
	b.nc = nc
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxAsyncPending))
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b.js = js
	if err := b.ensureStreams(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Close drains the connection and stops the embedded server, if any.
func (b *Bus) Close() {
	if b.nc != nil {
		_ = b.nc.Drain()
		for i := 0; i < 100 && !b.nc.IsClosed(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		b.nc.Close()
	}
	b.shutdownEmbedded()
}

func (b *Bus) shutdownEmbedded() {
	if b.embedded != nil {
		b.embedded.Shutdown()
		b.embedded.WaitForShutdown()
		b.embedded = nil
	}
}

// Prefix is the first token of the bus's subjects.
func (b *Bus) Prefix() string { return b.cfg.Prefix }

// ClientURL is the NATS URL other processes use to reach this bus.
func (b *Bus) ClientURL() string {
	if b.embedded != nil {
		return b.embedded.ClientURL()
	}
	return b.cfg.URL
}

// Conn is the underlying NATS connection, for key-value buckets and tests.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream is the underlying JetStream context.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Subject returns the absolute NATS subject of a relative one.
func (b *Bus) Subject(rel string) string { return b.cfg.Prefix + "." + rel }

// Relative strips the bus prefix from an absolute subject.
func (b *Bus) Relative(abs string) string {
	return strings.TrimPrefix(abs, b.cfg.Prefix+".")
}

// Ready reports nil when the connection is up and every stream exists.
func (b *Bus) Ready(ctx context.Context) error {
	if b.nc == nil || !b.nc.IsConnected() {
		return ErrNotConnected
	}
	for _, s := range b.streams() {
		if _, err := b.js.Stream(ctx, s.Name); err != nil {
			return fmt.Errorf("stream %s: %w", s.Name, err)
		}
	}
	return nil
}

// ErrNotConnected is returned while the NATS connection is down.
var ErrNotConnected = errors.New("bus: not connected to nats")

func redactURL(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "REDACTED" + u[i:]
		}
	}
	return u
}

// withTimeout applies the default publish timeout when ctx has no deadline.
func (b *Bus) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.cfg.PublishTimeout)
}

var _ = envelope.Version
