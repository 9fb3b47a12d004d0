// Package gatewaybench is the comparison behind `relay bench gateway`: the
// webhook gateway (`relay ingest`) and, when given a binary, Benthos
// configured for the same job, each run as its own child process against the
// same external NATS server, so that each one's CPU time (user + system from
// /proc/<pid>/stat) is its own and not the load generator's. Per target and
// run it measures:
//
//   - webhooks/s at saturation with a fixed number of concurrent clients
//     (the same for both), and the server's CPU per 1,000 webhooks there;
//   - p50/p99 at a fixed rate (1,000/s by default), from each webhook's
//     scheduled send time, and the CPU per 1,000 webhooks there.
//
// Before the load each run checks that the target refuses a wrong signature
// (non-2xx) and accepts a right one, and after it that every webhook answered
// 200 is stored in the target's stream. Runs interleave the targets, their
// order alternating, and the report gives medians and ranges and the ratios
// run by run. Each target publishes under a prefix of the run's own, whose
// streams are deleted afterwards. Linux only (/proc).
package gatewaybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/secret"
)

// Config bounds a run.
type Config struct {
	// Config is the load, as `relay bench ingest` bounds it: Concurrency
	// (clients at saturation, also Benthos's max_in_flight), Duration of
	// each phase, Rate of the latency phase, MaxRequests per phase, and
	// NATSURL, the external server both targets publish to (required
	// here). DataDir is not used.
	ingestbench.Config
	// Relay is the relay executable run as `relay bench proc ... ingest` (required).
	Relay string
	// Benthos, when set, is a Benthos executable (v4) run beside the gateway.
	Benthos string
	// Baseline, when set, is another relay executable whose gateway runs
	// beside, interleaved (before/after a change).
	Baseline string
	// Runs of every target, interleaved. Default 3, at most 50.
	Runs int
	// ProfileDir, when set, makes every gateway child write a CPU profile
	// DIR/gateway-<run>.pprof (baseline-<run>.pprof) of its life (warm-up
	// and both phases).
	ProfileDir string
	// Progress, when set, gets a line per finished run.
	Progress io.Writer
}

func (c *Config) setDefaults() {
	c.Config.SetDefaults()
	c.Runs = config.Positive(c.Runs, 3)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Validate reports settings outside the generator's bounds.
func (c *Config) Validate() error {
	switch {
	case c.Relay == "":
		return errors.New("gatewaybench: no relay binary to run")
	case c.NATSURL == "":
		return errors.New("gatewaybench: no NATS server URL")
	case c.Runs > 50:
		return fmt.Errorf("runs %d: at most 50", c.Runs)
	}
	return c.Config.Validate()
}

// Result is one run of one target. The phases' CPU is the target process's.
type Result struct {
	Target     string
	Saturation ingestbench.Phase
	FixedRate  ingestbench.Phase
	// Accepted is the webhooks answered 200 under load (warm-up included);
	// Stored the messages the target's stream gained meanwhile.
	Accepted, Stored int
}

// server is a target started for one run: where to post webhooks, its
// process and the stream it publishes to.
type server struct {
	url    string
	proc   process
	stream jetstream.Stream
}

// process is what a run needs of a child process (servebench.Process).
type process interface {
	CPU() (time.Duration, error)
	Stop() error
	Logs() string
}

// target starts one server for run n.
type target struct {
	name  string
	start func(ctx context.Context, n int) (*server, error)
}

// Run runs every target cfg.Runs times, interleaved with the order
// rotating run by run, and returns the report. ctx cancels the run (the children
// are stopped, the streams deleted).
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "relay-bench-gateway-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("profile dir: %w", err)
		}
	}
	prefix := "bench" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	b, err := bus.Connect(ctx, bus.Config{URL: cfg.NATSURL, FailFast: true, Prefix: prefix, Name: "relay-bench-gateway", Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := deleteStreams(ctx, b); err == nil && derr != nil {
			err = derr
		}
		b.Close()
	}()
	e := &env{cfg: cfg, dir: dir, bus: b, secret: uuid.NewString()}
	targets := []target{{"gateway (relay ingest)", e.gateway(cfg.Relay, "gateway")}}
	if cfg.Benthos != "" {
		targets = append(targets, target{"benthos", e.startBenthos})
	}
	if cfg.Baseline != "" {
		targets = append(targets, target{"gateway [baseline]", e.gateway(cfg.Baseline, "baseline")})
	}
	rep = &Report{Concurrency: cfg.Concurrency, Rate: cfg.Rate, Duration: cfg.Duration,
		BodyBytes: len(ingestbench.Payload()), Bus: secret.RedactURLs(cfg.NATSURL), Prefix: prefix}
	for n := range cfg.Runs {
		for i := range targets {
			t := targets[(i+n)%len(targets)]
			res, err := e.runOnce(ctx, t, n)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", t.name, n+1, err)
			}
			fmt.Fprintf(cfg.Progress, "run %d %-24s %s\n", n+1, t.name, res.line())
			rep.Results = append(rep.Results, res)
		}
	}
	return rep, nil
}

// deleteStreams deletes the run's streams: the relay's and Benthos's.
func deleteStreams(ctx context.Context, b *bus.Bus) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := b.DeleteStreams(ctx)
	if derr := b.JetStream().DeleteStream(ctx, benthosStream(b)); derr != nil && !errors.Is(derr, jetstream.ErrStreamNotFound) {
		err = errors.Join(err, fmt.Errorf("delete stream %s: %w", benthosStream(b), derr))
	}
	return err
}

// runOnce starts t, checks it, loads it and stops it.
func (e *env) runOnce(ctx context.Context, t target, n int) (res Result, err error) {
	s, err := t.start(ctx, n)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if serr := s.proc.Stop(); err == nil && serr != nil {
			err = serr
		}
	}()
	client := ingestbench.Client(e.cfg.Concurrency)
	defer client.CloseIdleConnections()
	if err := checkSignatures(ctx, client, s.url, []byte(e.secret)); err != nil {
		return Result{}, fmt.Errorf("%w; log:\n%s", err, s.proc.Logs())
	}
	before, err := msgs(ctx, s.stream)
	if err != nil {
		return Result{}, err
	}
	res, err = e.load(ctx, t.name, s, ingestbench.Webhook(client, s.url, []byte(e.secret)))
	if err != nil {
		return Result{}, err
	}
	after, err := msgs(ctx, s.stream)
	if err != nil {
		return Result{}, err
	}
	res.Stored = int(after - before)
	if res.Stored < res.Accepted {
		return res, fmt.Errorf("answered 200 to %d webhooks but stored %d", res.Accepted, res.Stored)
	}
	return res, nil
}

// load runs the warm-up, saturation and fixed-rate phases against s, each
// phase's CPU the server process's.
func (e *env) load(ctx context.Context, name string, s *server, op func(context.Context) error) (Result, error) {
	cfg := e.cfg
	res := Result{Target: name}
	warm, err := ingestbench.ClosedLoop(ctx, "warm-up", cfg.Concurrency, time.Second, 5000, op)
	if err != nil {
		return Result{}, err
	}
	res.Saturation, err = measure(s.proc, func() (ingestbench.Phase, error) {
		return ingestbench.ClosedLoop(ctx, name+" at saturation", cfg.Concurrency, cfg.Duration, cfg.MaxRequests, op)
	})
	if err != nil {
		return Result{}, err
	}
	res.FixedRate, err = measure(s.proc, func() (ingestbench.Phase, error) {
		return ingestbench.OpenLoop(ctx, fmt.Sprintf("%s at %d/s", name, cfg.Rate), cfg.Rate, cfg.Duration, cfg.MaxRequests, op)
	})
	if err != nil {
		return Result{}, err
	}
	res.Accepted = warm.Requests + res.Saturation.Requests + res.FixedRate.Requests
	return res, nil
}

// measure runs phase and sets its CPU to what p used meanwhile.
func measure(p process, phase func() (ingestbench.Phase, error)) (ingestbench.Phase, error) {
	cpu0, err := p.CPU()
	if err != nil {
		return ingestbench.Phase{}, err
	}
	ph, err := phase()
	if err != nil {
		return ingestbench.Phase{}, err
	}
	cpu1, err := p.CPU()
	if err != nil {
		return ingestbench.Phase{}, err
	}
	ph.CPU = cpu1 - cpu0
	return ph, nil
}

// msgs is the number of messages in stream now.
func msgs(ctx context.Context, stream jetstream.Stream) (uint64, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info: %w", err)
	}
	return info.State.Msgs, nil
}

func (r Result) line() string {
	return fmt.Sprintf("%6.0f/s  CPU/1000 %6s  errors %d | fixed rate p50 %8s p99 %8s  CPU/1000 %6s | stored %d of %d",
		r.Saturation.PerSecond(), r.Saturation.CPUPer1000().Round(time.Millisecond/10), r.Saturation.Errors,
		ingestbench.Round(r.FixedRate.P50), ingestbench.Round(r.FixedRate.P99),
		r.FixedRate.CPUPer1000().Round(time.Millisecond/10), r.Stored, r.Accepted)
}
