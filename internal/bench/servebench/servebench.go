// Package servebench is the load generator behind `relay bench serve`: it
// runs the relay as a child process on loopback (embedded JetStream, instant
// fakes for the model, Slack and GitHub), sends signed GitHub `issues`
// webhooks at a fixed rate and measures, per target:
//
//   - webhooks/s accepted and the p50/p99 of the HTTP accept (from each
//     request's scheduled send time, so a stall is not hidden);
//   - the child's CPU (user + system, from /proc) per 1,000 webhooks, from the
//     first webhook until every durable consumer has caught up;
//   - the backlog (pending and unacknowledged messages of every durable
//     consumer) when the load stops, and the time to drain it;
//   - for the whole relay on distinct threads, the p50/p99 from a webhook's
//     acceptance to its suggestion reaching the Slack approval channel.
//
// The targets are the gateway alone (`relay ingest`) and the whole relay
// (`relay serve`) with every webhook in its own thread or all of them in one;
// runs interleave them so a busy machine affects each alike, and the report
// gives medians and ranges. Everything is bounded and targets only the
// processes and loopback servers the run starts itself.
package servebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/relaystation/relay/config"
)

// Target is one configuration under load.
type Target struct {
	// Name labels the target in the report.
	Name string
	// Service is what the child runs: "ingest" (the gateway alone) or
	// "serve" (every service).
	Service string
	// Hot sends every webhook about one issue (one thread); otherwise each
	// webhook is about an issue of its own.
	Hot bool
	// Agent configures the model (the instant fake), so the agent drafts a
	// suggestion per task and approvals posts it to Slack; without it the
	// agent is off, as in a relay without LLM_BASE_URL.
	Agent bool
	// Binary, when set, runs this relay executable instead of
	// Config.Binary (a baseline build to compare with, in the same run).
	Binary string
}

// WithBinary returns the targets run with another relay executable, their
// names marked with label.
func WithBinary(ts []Target, bin, label string) []Target {
	out := make([]Target, len(ts))
	for i, t := range ts {
		t.Binary, t.Name = bin, t.Name+" ["+label+"]"
		out[i] = t
	}
	return out
}

// Targets are the three the command compares by default, in the order each
// run interleaves them: the gateway alone, and every service (the agent off)
// on distinct threads and on one hot thread.
var Targets = []Target{
	{Name: "gateway alone (relay ingest)", Service: "ingest"},
	{Name: "relay serve, distinct threads", Service: "serve"},
	{Name: "relay serve, one hot thread", Service: "serve", Hot: true},
}

// AgentTargets are the whole relay with the agent drafting a suggestion per
// task (`relay bench serve -agent` adds them).
var AgentTargets = []Target{
	{Name: "relay serve + agent, distinct", Service: "serve", Agent: true},
	{Name: "relay serve + agent, hot thread", Service: "serve", Hot: true, Agent: true},
}

// Config bounds a run.
type Config struct {
	// Binary is the relay executable to run as the child (required).
	Binary string
	// Rate of webhooks per second. Default 1,000, at most 20,000.
	Rate int
	// Duration of the load of each run. Default 10s, at most 5m.
	Duration time.Duration
	// Runs of every target, interleaved. Default 3, at most 50.
	Runs int
	// DrainTimeout bounds the wait for the consumers to catch up after the
	// load. Default 2m.
	DrainTimeout time.Duration
	// ProfileDir, when set, makes every child write a CPU profile
	// DIR/<target>-<run>.pprof of its whole life.
	ProfileDir string
	// Targets to run; default Targets.
	Targets []Target
	// Progress, when set, gets a line per finished run.
	Progress io.Writer
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	c.Rate = config.Positive(c.Rate, 1000)
	c.Duration = config.Positive(c.Duration, 10*time.Second)
	c.Runs = config.Positive(c.Runs, 3)
	c.DrainTimeout = config.Positive(c.DrainTimeout, 2*time.Minute)
	if len(c.Targets) == 0 {
		c.Targets = Targets
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports settings outside the generator's bounds.
func (c *Config) Validate() error {
	switch {
	case c.Binary == "":
		return errors.New("servebench: no relay binary to run")
	case c.Rate > 20_000:
		return fmt.Errorf("rate %d/s: at most 20,000", c.Rate)
	case c.Duration > 5*time.Minute:
		return fmt.Errorf("duration %s: at most 5m per run", c.Duration)
	case c.Runs > 50:
		return fmt.Errorf("runs %d: at most 50", c.Runs)
	}
	for _, t := range c.Targets {
		if t.Service != "ingest" && t.Service != "serve" {
			return fmt.Errorf("target %q: service %q, want ingest or serve", t.Name, t.Service)
		}
	}
	return nil
}

// Run runs every target cfg.Runs times, interleaved, and returns the report.
// ctx cancels the run (the children are stopped).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("profile dir: %w", err)
		}
	}
	rep := &Report{Rate: cfg.Rate, Duration: cfg.Duration, BodyBytes: len(template)}
	for run := range cfg.Runs {
		for i, t := range cfg.Targets {
			profile := ""
			if cfg.ProfileDir != "" {
				profile = filepath.Join(cfg.ProfileDir, fmt.Sprintf("%d-%s-%d.pprof", i, t.Service, run))
			}
			res, err := runOnce(ctx, cfg, t, profile)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", t.Name, run+1, err)
			}
			fmt.Fprintf(cfg.Progress, "run %d %-32s %s\n", run+1, t.Name, res.line())
			rep.Results = append(rep.Results, res)
		}
	}
	return rep, nil
}
