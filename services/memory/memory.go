// Package memory is the memory worker (`relay memory`, also part of `relay
// serve`). It consumes every inbound envelope and the work subjects that carry
// assistant and tool envelopes, appends each envelope of a thread as a turn to
// the thread's session, applies memory_update (episodic and long-term), and
// answers the agent's memory requests over NATS request/reply as the
// nats.go/micro service "relay-memory" (package memory/remote), stopped
// when Run returns.
//
// The worker handles one thread's envelopes in the order its handlers took
// them, one batch at a time: the envelopes of a hot thread that arrive while
// its session is being written go to the session together in the next write,
// and on a hot thread that write waits up to Config.Linger for more of them.
// So its own handlers never conflict on a session, and other threads go on
// in parallel.
//
// Outcomes: a stored envelope is acked; a malformed memory_update is
// dead-lettered with its reason; a store or embeddings endpoint that cannot be
// reached naks the message with a delay, so nothing is lost and the worker
// catches up when the server is back.
package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/memory/remote"
)

// Consumer is one durable consumer of the worker: the bus takes one filter
// subject per consumer.
type Consumer struct {
	// Name is the durable consumer name.
	Name string
	// Subject is the relative filter subject.
	Subject string
}

// DefaultConsumers are the subjects the worker reads: every inbound envelope,
// tool calls and results, agent steps, and explicit memory updates.
var DefaultConsumers = []Consumer{
	{Name: "memory-in", Subject: "in.>"},
	{Name: "memory-tool", Subject: "tool.>"},
	{Name: "memory-agent", Subject: "agent.>"},
	{Name: "memory-update", Subject: "memory.>"},
}

// Config configures the worker.
type Config struct {
	// Consumers default to DefaultConsumers.
	Consumers []Consumer
	// Concurrency is how many messages each consumer handles at once.
	// Default 16: the handlers of a hot thread wait for each other and share
	// its session writes, so more of them in flight means fewer writes.
	Concurrency int
	// MaxDeliver is how often a message is tried before it is dead-lettered.
	// Default 20: with NakDelays that rides out about ten minutes of a store outage.
	MaxDeliver int
	// NakDelays are the redelivery delays after transient failures. Default
	// 1s, 2s, 5s, 10s, 30s (the last repeats).
	NakDelays []time.Duration
	// HandlerTimeout bounds one envelope's handling. Default 60s.
	HandlerTimeout time.Duration
	// Linger is how long the envelopes of a hot thread (one whose previous
	// batch was taken less than Linger before) may wait for more of the
	// thread's envelopes, so that one session write carries them all; the
	// wait ends early once Concurrency of them are queued. Default
	// DefaultLinger; negative: never wait.
	Linger time.Duration
	// DisableRPC turns off the request/reply endpoints.
	DisableRPC bool
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if len(c.Consumers) == 0 {
		c.Consumers = DefaultConsumers
	}
	c.Concurrency = config.Positive(c.Concurrency, 16)
	c.MaxDeliver = config.Positive(c.MaxDeliver, 20)
	c.HandlerTimeout = config.Positive(c.HandlerTimeout, 60*time.Second)
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if len(c.NakDelays) == 0 {
		c.NakDelays = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a configuration the worker cannot run with.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for _, cons := range c.Consumers {
		if cons.Name == "" || cons.Subject == "" {
			return fmt.Errorf("memory worker: consumer %+v needs a name and a subject", cons)
		}
		if seen[cons.Name] {
			return fmt.Errorf("memory worker: consumer name %s used twice", cons.Name)
		}
		seen[cons.Name] = true
	}
	return nil
}

// maxBatch bounds the envelopes of one thread observed together.
const maxBatch = 64

// DefaultLinger is Config.Linger's default: at 1,000 webhooks/s about one
// thread, a session write carries about five turns instead of one.
const DefaultLinger = 5 * time.Millisecond

// Service is the memory worker.
type Service struct {
	cfg     Config
	bus     *bus.Bus
	mem     *memory.Memory
	log     *slog.Logger
	threads *threadQueues
}

// New returns the worker on b, recording into mem.
func New(cfg Config, b *bus.Bus, mem *memory.Memory) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if b == nil || mem == nil {
		return nil, errors.New("memory worker: bus and memory are required")
	}
	threads := newThreadQueues(maxBatch).withLinger(max(cfg.Linger, 0), cfg.Concurrency)
	return &Service{cfg: cfg, bus: b, mem: mem, log: cfg.Logger, threads: threads}, nil
}

// Handler is the bus handler of every consumer.
func (s *Service) Handler() bus.Handler {
	return bus.Chain(bus.HandlerFunc(s.handle), bus.Timeout(s.cfg.HandlerTimeout))
}

func (s *Service) handle(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	var err error
	if th := e.Meta.Thread; th != "" {
		err = s.threads.do(ctx, th, e, s.mem.ObserveAll)
	} else {
		err = s.mem.Observe(ctx, e)
	}
	if err == nil {
		return nil
	}
	var ue *memory.UpdateError
	var de *embed.DimensionError
	if errors.As(err, &ue) || errors.As(err, &de) {
		return bus.Permanent(err)
	}
	return fmt.Errorf("envelope %s (thread %q): %w", e.ID, e.Meta.Thread, err)
}

// Run consumes until ctx is cancelled, then drains in-flight work.
func (s *Service) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	h := s.Handler()
	for _, c := range s.cfg.Consumers {
		cc := bus.ConsumerConfig{Name: c.Name, Subject: c.Subject, Concurrency: s.cfg.Concurrency,
			MaxDeliver: s.cfg.MaxDeliver, NakDelays: s.cfg.NakDelays}
		g.Go(func() error { return s.bus.Consume(gctx, cc, h) })
	}
	if !s.cfg.DisableRPC {
		g.Go(func() error {
			return remote.Serve(gctx, s.bus.Conn(), s.mem, remote.ServerConfig{Prefix: s.bus.Prefix(), Logger: s.log})
		})
	}
	s.log.Info("memory worker started", "consumers", len(s.cfg.Consumers), "rpc", !s.cfg.DisableRPC)
	return g.Wait()
}
