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
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/jsack"
	"github.com/relaystation/relay/secret"
)

// Config says where the bus lives. The zero value starts an embedded server
// under ./data listening on 127.0.0.1:4222.
type Config struct {
	// URL of an external NATS server (NATS_URL), or a comma-separated list of
	// the servers of a cluster. Empty starts an embedded one.
	URL string
	// DataDir is the embedded server's state directory (RELAY_DATA_DIR); its
	// JetStream files live in DataDir/nats. Default "./data".
	DataDir string
	// Listen is the embedded server's client address (RELAY_NATS_LISTEN), so
	// other processes can attach. Default "127.0.0.1:4222"; port 0 picks one.
	Listen string
	// Token, when set, is required by the embedded server from every client
	// (RELAY_NATS_TOKEN), and sent by this bus's connection unless URL carries
	// credentials of its own. Unset, the embedded server accepts any client
	// that reaches Listen.
	Token secret.Value
	// Prefix is the first token of every subject and of stream names. Default "relay".
	Prefix string
	// Name is the NATS connection name, shown in server monitoring.
	Name string
	// Replicas is how many servers of a JetStream cluster hold each stream
	// and key-value bucket (RELAY_STREAM_REPLICAS): 1 on a single server, 3
	// (or 5) on a cluster. Raising it on a running cluster scales the
	// existing streams up at the next start. Default 1.
	Replicas int
	// FailFast makes Connect fail at once when no server answers, for
	// operator commands. Otherwise Connect waits for the server (a process
	// started before NATS comes up serves once it is up).
	FailFast bool
	// Retention is how long inbound and work messages are kept. Default 7 days.
	Retention time.Duration
	// DeadLetterRetention is how long dead letters are kept. Default 30 days.
	DeadLetterRetention time.Duration
	// DuplicateWindow is JetStream's de-duplication window for Nats-Msg-Id.
	// Default 15 minutes; at least 10 minutes, which covers Slack's and
	// GitHub's retry schedules.
	DuplicateWindow time.Duration
	// RequestTimeout bounds each request to JetStream: a publish, a
	// consumer's setup, and a read or write of a bucket opened through the
	// bus (OpenBucket, or jsack.Bucket on JetStream()). The caller's deadline
	// wins when it is earlier; a later one does not lengthen the wait, so a
	// request whose reply was lost when the connection dropped (nats.go does
	// not fail the requests in flight on a reconnect) holds its caller, and a
	// handler's delivery, no longer than this. Default 5s.
	RequestTimeout time.Duration
	// RetryFor is how long an operation on a bucket opened through the bus
	// retries a transient failure (a timeout, no leader) before it returns
	// an error wrapping ErrUnavailable; a handler then naks its message.
	// Default DefaultRetryFor.
	RetryFor time.Duration
	// MaxAsyncPending bounds PublishAsync's unacknowledged publishes. Default 256.
	MaxAsyncPending int
	// Metrics, when set, records publish and consume counts and latencies.
	Metrics *Metrics
	// Trace, when set, is called around publishes and handled deliveries
	// (W3C trace context in headers, spans; internal/telemetry). Nil costs
	// nothing.
	Trace *TraceHooks
	// Logger; nil discards.
	Logger *slog.Logger
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c *Config) setDefaults() {
	c.DataDir = cmp.Or(c.DataDir, "./data")
	c.Listen = cmp.Or(c.Listen, "127.0.0.1:4222")
	c.Prefix = cmp.Or(c.Prefix, "relay")
	c.Name = cmp.Or(c.Name, "relay")
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.Retention = cmp.Or(c.Retention, 7*24*time.Hour)
	c.DeadLetterRetention = cmp.Or(c.DeadLetterRetention, 30*24*time.Hour)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, 15*time.Minute)
	c.MaxAsyncPending = cmp.Or(c.MaxAsyncPending, 256)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, 5*time.Second)
	c.RetryFor = cmp.Or(c.RetryFor, DefaultRetryFor)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a configuration the bus cannot run with.
func (c *Config) Validate() error {
	if !prefixRE.MatchString(c.Prefix) {
		return fmt.Errorf("bus prefix %q: want letters, digits, '-' or '_'", c.Prefix)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("bus replicas %d: want 1 to 5", c.Replicas)
	}
	if c.DuplicateWindow < 10*time.Minute {
		return fmt.Errorf("bus duplicate window %s: must be at least 10m to cover provider retries", c.DuplicateWindow)
	}
	return nil
}

// Bus is a connection to JetStream with the relay's streams in place. It is
// safe for concurrent use. Close releases it (and stops an embedded server).
//
// The connection comes back by itself: it reconnects without limit after a
// server restart or a network failure, and makes sure the streams exist each
// time it connects. Ready reports whether it can take messages now; Alive
// reports whether it can ever again (nats.go gives a connection up for good
// on some server errors), for a liveness probe that restarts the process.
type Bus struct {
	cfg      Config
	log      *slog.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	embedded *server.Server
	metrics  *Metrics
	names    streamNames

	kick      chan struct{} // a (re)connect asks the keeper to ensure streams
	stop      chan struct{} // closed by Close
	keeperWG  sync.WaitGroup
	readyOnce sync.Once
	ready     chan struct{} // closed when first connected with streams in place
	closing   atomic.Bool
	lost      atomic.Pointer[error] // why the connection closed for good
	lostCh    chan struct{}         // closed with lost
	opened    time.Time             // where a new DeliverNew consumer starts
	leaders   *beacon               // fired when a leader is elected or the connection is back
	waiting   pending               // streams, buckets, consumers not in place yet
	setupErr  atomic.Pointer[error] // a setting the server refuses (replicas, credentials)
}

// Connect connects to cfg.URL, or starts the embedded server when it is
// empty, and creates or updates the relay's streams. While no server answers
// it waits, retrying, until ctx is done (unless cfg.FailFast). The caller must
// Close the Bus.
func Connect(ctx context.Context, cfg Config) (*Bus, error) {
	b, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	if err := b.WaitReady(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Open is Connect without the wait: it returns as soon as the embedded
// server (if any) runs, with the connection to an external server possibly
// still coming up. Ready reports ErrNotConnected until it is up; WaitReady
// waits for it. Long-running processes Open, start their health endpoints,
// then WaitReady. The caller must Close the Bus.
func Open(cfg Config) (*Bus, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Bus{
		cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics, names: newStreamNames(cfg.Prefix),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), ready: make(chan struct{}),
		lostCh: make(chan struct{}), opened: time.Now(), leaders: newBeacon(),
	}
	url := cfg.URL
	opts := b.natsOptions()
	if url == "" {
		ns, err := startEmbedded(cfg.DataDir, cfg.Listen, cfg.Token, b.log)
		if err != nil {
			return nil, err
		}
		b.embedded = ns
		// This process's client reaches the server without a socket
		// (inProcess: a pipe buffered like one); other processes use the
		// listener.
		url = ns.ClientURL()
		opts = append(opts, nats.InProcessServer(inProcess{ns}))
		b.log.Info("embedded nats started", "listen", url, "store", cfg.DataDir, "auth", cfg.Token.IsSet())
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		b.shutdownEmbedded()
		return nil, fmt.Errorf("connect to nats %s: %w", secret.RedactURLs(url), err)
	}
	b.nc = nc
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(cfg.MaxAsyncPending), jetstream.WithDefaultTimeout(cfg.RequestTimeout))
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b.js = replicated{JetStream: js, b: b}
	b.watchLeaders()
	b.keeperWG.Add(1)
	go b.keepStreams()
	// The connect handler kicks the stream keeper once connected, now or
	// later; a second kick here would update the streams again while the
	// first callers create consumers, which races inside nats-server.
	if !nc.IsConnected() {
		b.log.Warn("nats not reachable yet; waiting for it", "url", secret.RedactURLs(url))
	}
	return b, nil
}

// natsOptions are the options of the bus's connection: reconnect forever,
// log what happens to it, and wake the stream keeper when it (re)connects.
func (b *Bus) natsOptions() []nats.Option {
	opts := []nats.Option{
		nats.Name(b.cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		// A server that refuses credentials twice (say, while it restarts with
		// new ones) must not end the connection for good.
		nats.IgnoreAuthErrorAbort(),
		nats.ConnectHandler(func(*nats.Conn) { b.signal(); b.leaders.fire() }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				b.log.Warn("nats subscription error", "subject", sub.Subject, "err", err)
				return
			}
			b.log.Warn("nats error", "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil && !b.closing.Load() {
				b.log.Warn("nats disconnected; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			b.log.Info("nats reconnected", "url", secret.RedactURLs(c.ConnectedUrl()))
			b.signal()
			b.leaders.fire()
		}),
		nats.ClosedHandler(func(c *nats.Conn) {
			if b.closing.Load() {
				return
			}
			err := c.LastError()
			if err == nil {
				err = errors.New("closed")
			}
			err = fmt.Errorf("nats connection closed for good: %w", err)
			if b.lost.CompareAndSwap(nil, &err) {
				close(b.lostCh)
			}
			b.log.Error("nats connection lost; the process must restart", "err", err)
		}),
	}
	if !b.cfg.FailFast {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	if b.cfg.Token.IsSet() && !hasUserInfo(b.cfg.URL) {
		opts = append(opts, nats.Token(b.cfg.Token.Reveal()))
	}
	return opts
}

// WaitReady blocks until the bus first connected and its streams exist, or
// ctx is done, or the connection was given up, or a setting proved wrong:
// the server refused the credentials (for authRefusal on end), or it cannot
// hold the streams' replica count (an error wrapping ErrReplicas). A slow or
// leaderless server is waited for, however long.
func (b *Bus) WaitReady(ctx context.Context) error {
	var refused time.Time
	for {
		select {
		case <-b.ready:
			return nil
		case <-ctx.Done():
			if err := b.Alive(); err != nil {
				return err
			}
			return fmt.Errorf("wait for nats %s: %w (last error: %v)", secret.RedactURLs(b.cfg.URL), ctx.Err(), b.nc.LastError())
		case <-time.After(100 * time.Millisecond):
			// A connection that fails fast (or is given up) never becomes ready.
			if err := b.Alive(); err != nil {
				return err
			}
			if p := b.setupErr.Load(); p != nil {
				return *p
			}
			switch err := b.nc.LastError(); {
			case !b.nc.IsConnected() && authError(err):
				if refused.IsZero() {
					refused = time.Now()
				} else if time.Since(refused) > authRefusal {
					return fmt.Errorf("NATS_URL %s or RELAY_NATS_TOKEN: the server refuses the credentials: %w", secret.RedactURLs(b.cfg.URL), err)
				}
			default:
				refused = time.Time{}
			}
		}
	}
}

// authRefusal is how long a server must go on refusing the credentials at
// start-up before WaitReady takes them for wrong (a server restarting with
// new ones refuses them for a moment).
const authRefusal = 3 * time.Second

// authError reports whether err is the server refusing the credentials.
func authError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		return true
	}
	return strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}

// signal asks the stream keeper to ensure the streams.
func (b *Bus) signal() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// keepStreams ensures the streams after every (re)connect, retrying with
// backoff while JetStream is not answering yet (a restarted server replaying
// its store, a cluster electing leaders). It runs until Close.
func (b *Bus) keepStreams() {
	defer b.keeperWG.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-b.stop; cancel() }()
	for {
		select {
		case <-b.stop:
			return
		case <-b.kick:
		}
		if err := b.ensureStreams(ctx); err != nil && ctx.Err() == nil {
			// A replica count the server cannot hold: start-up stops
			// (WaitReady); a running process keeps what it has.
			b.setupErr.CompareAndSwap(nil, &err)
			b.log.Error("streams not in place", "err", err)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		b.readyOnce.Do(func() { close(b.ready) })
	}
}

// Close drains the connection and stops the embedded server, if any.
func (b *Bus) Close() {
	if !b.closing.CompareAndSwap(false, true) {
		return
	}
	close(b.stop)
	if b.nc != nil {
		if err := b.nc.Drain(); err == nil {
			for i := 0; i < 100 && !b.nc.IsClosed(); i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
		b.nc.Close()
	}
	b.keeperWG.Wait()
	b.shutdownEmbedded()
}

func (b *Bus) shutdownEmbedded() {
	if b.embedded != nil {
		b.embedded.Shutdown()
		b.embedded.WaitForShutdown()
		b.embedded = nil
	}
}

// Alive reports nil unless the connection was given up for good (nats.go
// closes it on some server errors, and it does not come back): then the
// process must restart, and a liveness probe should say so. A connection
// that is only reconnecting is alive.
func (b *Bus) Alive() error {
	if p := b.lost.Load(); p != nil {
		return *p
	}
	if b.nc != nil && b.nc.IsClosed() && !b.closing.Load() {
		return errors.New("nats connection closed")
	}
	return nil
}

// Lost is closed when the connection was given up for good (Alive then
// says why); a process that cannot restart itself otherwise exits on it.
func (b *Bus) Lost() <-chan struct{} { return b.lostCh }

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

// Ready reports nil when the connection is up and every stream exists; while
// the bus waits for a stream, bucket or consumer (Ensure), an error wrapping
// ErrWaiting that names each. It waits at most RequestTimeout.
func (b *Bus) Ready(ctx context.Context) error {
	if err := b.Alive(); err != nil {
		return err
	}
	if b.nc == nil || !b.nc.IsConnected() {
		return ErrNotConnected
	}
	if err := b.waiting.err(); err != nil {
		return err
	}
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	for _, s := range b.streams() {
		if _, err := b.js.Stream(ctx, s.Name); err != nil {
			return fmt.Errorf("stream %s: %w", s.Name, err)
		}
	}
	return nil
}

// ErrNotConnected is returned while the NATS connection is down.
var ErrNotConnected = errors.New("bus: not connected to nats")

// hasUserInfo reports whether a NATS URL (list) carries credentials.
func hasUserInfo(urls string) bool {
	for _, u := range strings.Split(urls, ",") {
		if _, rest, ok := strings.Cut(u, "://"); ok {
			host, _, _ := strings.Cut(rest, "/")
			if strings.Contains(host, "@") {
				return true
			}
		}
	}
	return false
}

// MaxSubject is the longest absolute subject the bus publishes to. NATS
// closes a connection whose protocol line passes its limit (4 KiB by
// default), and nats.go does not reconnect after that; the bus refuses such a
// subject instead.
const MaxSubject = 1024

// ErrInvalidSubject is returned for a subject the bus will not publish to:
// too long, an empty token, a wildcard or a blank character.
var ErrInvalidSubject = errors.New("invalid subject")

// checkSubject reports an absolute subject NATS would refuse.
func checkSubject(abs string) error {
	if len(abs) > MaxSubject {
		return fmt.Errorf("%w: %d bytes over the %d-byte limit", ErrInvalidSubject, len(abs), MaxSubject)
	}
	for tok := range strings.SplitSeq(abs, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\x00") {
			return fmt.Errorf("%w: %.64q", ErrInvalidSubject, abs)
		}
	}
	return nil
}

// withTimeout bounds one request by RequestTimeout (ctx's deadline, when
// earlier, stays).
func (b *Bus) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return jsack.Bound(ctx, b.cfg.RequestTimeout)
}

var _ = envelope.Version
