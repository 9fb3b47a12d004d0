package servebench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/internal/bench/ingestbench"
)

// Result is one run of one target.
type Result struct {
	Target Target
	// Accept is the fixed-rate load: accepted webhooks (200), errors and
	// the accept latency from each webhook's scheduled time.
	Accept ingestbench.Phase
	// CPU is the child's user + system time from the first webhook until
	// the consumers caught up.
	CPU time.Duration
	// Backlog is the pending and unacknowledged messages of every durable
	// consumer when the load stopped; Drain the time until there were none.
	Backlog int
	Drain   time.Duration
	// Suggestions that reached the Slack approval channel, and the
	// acceptance-to-suggestion latencies (distinct threads only).
	Suggestions int
	Loop        []time.Duration
	// Delivered is how many messages each durable consumer was sent over
	// the child's life until the drain (startup's few included).
	Delivered map[string]uint64
	// Stored is how many messages each stream stored over the child's life
	// until the drain (its last sequence: startup's few included, and
	// key-value revisions since overwritten or deleted).
	Stored map[string]uint64
}

// CPUPer1000 is the CPU time per 1,000 accepted webhooks.
func (r Result) CPUPer1000() time.Duration {
	if r.Accept.Requests == 0 {
		return 0
	}
	return r.CPU * 1000 / time.Duration(r.Accept.Requests)
}

func (r Result) line() string {
	return fmt.Sprintf("%6.0f/s  errors %d  CPU/1000 %7s  backlog %6d  drain %8s  accept p99 %8s  suggestions %d",
		r.Accept.PerSecond(), r.Accept.Errors, r.CPUPer1000().Round(time.Millisecond), r.Backlog,
		r.Drain.Round(time.Millisecond), ingestbench.Round(r.Accept.P99), r.Suggestions)
}

// runOnce starts a child for t, loads it at cfg.Rate for cfg.Duration, waits
// for the drain and stops it.
func runOnce(ctx context.Context, cfg Config, t Target, profile string) (res Result, err error) {
	dir, err := os.MkdirTemp("", "relay-bench-serve-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	f := newFakes()
	defer f.close()
	c, err := startChild(ctx, cfg, t, dir, profile, f)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if serr := c.Stop(); err == nil && serr != nil {
			err = serr
		}
	}()
	nc, err := nats.Connect(c.natsURL, nats.Name("relay-bench-serve"))
	if err != nil {
		return Result{}, fmt.Errorf("connect to the relay's NATS at %s: %w", c.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, err
	}
	return load(ctx, cfg, t, c, js, f)
}

// load sends the webhooks and measures the drain.
func load(ctx context.Context, cfg Config, t Target, c *child, js jetstream.JetStream, f *fakeSet) (Result, error) {
	s := newSender(c.base, t.Hot)
	defer s.client.CloseIdleConnections()
	f.slack.OnCall(s.onSlack)
	cpu0, err := c.CPU()
	if err != nil {
		return Result{}, err
	}
	res := Result{Target: t}
	max := int(cfg.Duration.Seconds()*float64(cfg.Rate)) + 1
	res.Accept, err = ingestbench.OpenLoop(ctx, t.Name, cfg.Rate, cfg.Duration, max, s.send)
	if err != nil {
		return Result{}, err
	}
	stopped := time.Now()
	if res.Backlog, err = backlog(ctx, js); err != nil {
		return Result{}, err
	}
	// With the agent on distinct threads, every accepted webhook becomes one
	// suggestion in Slack: the run is drained when the last has arrived.
	done := func() bool { return true }
	if t.Agent && !t.Hot {
		done = func() bool { n, _ := s.loop(); return n >= res.Accept.Requests }
	}
	d, err := waitDrained(ctx, js, c, stopped, cfg.DrainTimeout, done)
	if err != nil {
		if t.Agent && !t.Hot {
			err = fmt.Errorf("%w (issues without a suggestion in Slack: %v)", err, s.unanswered(10))
		}
		return Result{}, fmt.Errorf("%w; the relay's log:\n%s", err, c.Logs())
	}
	res.Drain, res.CPU = d.after, d.cpu-cpu0
	if res.Delivered, err = delivered(ctx, js); err != nil {
		return Result{}, err
	}
	if res.Stored, err = stored(ctx, js); err != nil {
		return Result{}, err
	}
	res.Suggestions, res.Loop = s.loop()
	if t.Hot {
		res.Loop = nil // one issue: the latency of its first suggestion says nothing
	}
	slices.Sort(res.Loop)
	return res, nil
}
