package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/relaystation/relay/internal/bench/gatewaybench"
	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/internal/bench/servebench"
	"github.com/relaystation/relay/secret"
)

const benchUsage = "usage: relay bench ingest [-c N] [-d 5s] [-rate 1000] [-n N] [-nats URL] [-cpuprofile F]\n" +
	"     | relay bench serve [-rate 1000] [-d 10s] [-runs 3] [-agent] [-hot] [-baseline BIN] [-cpuprofile DIR]\n" +
	"     | relay bench gateway [-benthos BIN] [-baseline BIN] [-nats URL] [-c 32] [-d 5s] [-rate 1000] [-runs 3] [-cpuprofile DIR]\n" +
	"     | relay bench flood [-n 10000] [-rate 2000] [-other 5] [-set NAME=VALUE]..."

func init() {
	registerCommand(&command{
		name:    "bench",
		usage:   "ingest|serve|gateway|flood",
		summary: "load-test on loopback: the gateway (`bench ingest`), the gateway alone vs the whole relay (`bench serve`), the gateway vs Benthos (`bench gateway`), a flood for one repository (`bench flood`)",
		run:     runBench,
	})
}

func runBench(ctx context.Context, a *app, args []string) error {
	if err := a.checkEnv(); err != nil {
		return err
	}
	return subcommands{"ingest": benchIngest, "serve": benchServe, "gateway": benchGateway, "flood": benchFlood, "proc": benchProc}.run(ctx, a, "bench", benchUsage, args)
}

func benchIngest(ctx context.Context, a *app, args []string) error {
	fs := a.flags("bench ingest")
	var cfg ingestbench.Config
	fs.IntVar(&cfg.Concurrency, "c", 32, "concurrent clients at saturation (at most 1024)")
	fs.DurationVar(&cfg.Duration, "d", 0, "duration of each phase (default 5s, at most 1m)")
	fs.IntVar(&cfg.Rate, "rate", 1000, "requests/s of the fixed-rate phase (at most 20000)")
	fs.IntVar(&cfg.MaxRequests, "n", 0, "cap on requests per phase (default 200000)")
	fs.StringVar(&cfg.NATSURL, "nats", "", "publish to this external NATS server (its own stream prefix, deleted after) instead of an embedded one")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the saturation phase's process to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	cfg.Logger = a.log
	fmt.Fprintln(a.stderr, "relay bench ingest: JetStream and gateway on 127.0.0.1, 5 phases...")
	return a.writeReport(ingestbench.Run(ctx, cfg))
}

// benchServe runs this binary as the gateway alone and as the whole relay,
// interleaved, under the same load (internal/bench/servebench).
func benchServe(ctx context.Context, a *app, args []string) error {
	fs := a.flags("bench serve")
	var cfg servebench.Config
	fs.IntVar(&cfg.Rate, "rate", 1000, "webhooks/s (at most 20000)")
	fs.DurationVar(&cfg.Duration, "d", 0, "duration of the load of each run (default 10s, at most 5m)")
	fs.IntVar(&cfg.Runs, "runs", 3, "runs of every target, interleaved (at most 50)")
	fs.DurationVar(&cfg.DrainTimeout, "drain", 0, "longest wait for the consumers to catch up after the load (default 2m)")
	fs.StringVar(&cfg.ProfileDir, "cpuprofile", "", "directory for a CPU profile of every run's relay process")
	withAgent := fs.Bool("agent", false, "add the whole relay with the agent drafting a suggestion per task (instant model)")
	hotOnly := fs.Bool("hot", false, "only the gateway and the hot-thread targets")
	baseline := fs.String("baseline", "", "another relay binary whose whole-relay targets run beside these, interleaved (before/after)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Targets = benchTargets(*withAgent, *hotOnly)
	if *baseline != "" {
		cfg.Targets = append(cfg.Targets, servebench.WithBinary(cfg.Targets[1:], *baseline, "baseline")...)
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench serve: the relay binary to run: %w", err)
	}
	cfg.Binary, cfg.Progress, cfg.Logger = bin, a.stderr, a.log
	fmt.Fprintf(a.stderr, "relay bench serve: %s as child processes, gateway alone / whole relay, %d runs...\n", bin, cfg.Runs)
	return a.writeReport(servebench.Run(ctx, cfg))
}

// benchFlood runs this binary as the whole relay with the agent under a
// flood of webhooks for one repository, beside another repository's
// trickle (internal/bench/servebench.Flood).
func benchFlood(ctx context.Context, a *app, args []string) error {
	fs := a.flags("bench flood")
	var cfg servebench.FloodConfig
	fs.IntVar(&cfg.N, "n", 10_000, "webhooks of the flood (at most 100000)")
	fs.IntVar(&cfg.Rate, "rate", 2000, "webhooks/s of the flood (at most 20000)")
	fs.IntVar(&cfg.OtherRate, "other", 5, "webhooks/s of the other repository (at most 100)")
	fs.Func("set", "a setting of the relay under load, NAME=VALUE (repeatable), for example RELAY_LIMIT_TASKS_PER_REPO=0", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("%q: want NAME=VALUE", v)
		}
		cfg.Env = append(cfg.Env, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench flood: the relay binary to run: %w", err)
	}
	cfg.Binary, cfg.Progress = bin, a.stderr
	fmt.Fprintf(a.stderr, "relay bench flood: %s serve as a child process, %d webhooks for one repository...\n", bin, cfg.N)
	rep, err := servebench.Flood(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Write(a.stdout)
	return nil
}

// benchGateway runs this binary's gateway (`relay ingest`) and, with
// -benthos, Benthos configured for the same job, each as its own process
// against one external NATS server, interleaved (internal/bench/gatewaybench).
func benchGateway(ctx context.Context, a *app, args []string) error {
	fs := a.flags("bench gateway")
	var cfg gatewaybench.Config
	fs.StringVar(&cfg.Benthos, "benthos", "", "a Benthos v4 binary to compare with (scripts/bench-benthos.sh builds one)")
	fs.StringVar(&cfg.NATSURL, "nats", "nats://127.0.0.1:4222", "the external NATS server both publish to (streams of the run's own, deleted after)")
	fs.IntVar(&cfg.Concurrency, "c", 32, "concurrent clients at saturation, and Benthos's max_in_flight (at most 1024)")
	fs.DurationVar(&cfg.Duration, "d", 0, "duration of each phase (default 5s, at most 1m)")
	fs.IntVar(&cfg.Rate, "rate", 1000, "webhooks/s of the latency phase (at most 20000)")
	fs.IntVar(&cfg.Runs, "runs", 3, "runs of every target, interleaved (at most 50)")
	fs.StringVar(&cfg.Baseline, "baseline", "", "another relay binary whose gateway runs beside, interleaved (before/after)")
	fs.StringVar(&cfg.ProfileDir, "cpuprofile", "", "directory for a CPU profile of every run's gateway process")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench gateway: the relay binary to run: %w", err)
	}
	cfg.Relay, cfg.Progress, cfg.Logger = bin, a.stderr, a.log
	fmt.Fprintf(a.stderr, "relay bench gateway: %s ingest as a child process against %s, %d runs...\n", bin, secret.RedactURLs(cfg.NATSURL), cfg.Runs)
	return a.writeReport(gatewaybench.Run(ctx, cfg))
}

// writeReport writes the report of a finished benchmark to stdout, or
// returns the error that ended it.
func (a *app) writeReport(rep interface{ Write(io.Writer) }, err error) error {
	if err != nil {
		return err
	}
	rep.Write(a.stdout)
	return nil
}

// benchTargets are the targets of `bench serve`: the gateway alone always,
// the hot-thread ones only with hot, the agent's with agent.
func benchTargets(agent, hot bool) []servebench.Target {
	all := servebench.Targets
	if agent {
		all = append(slices.Clone(all), servebench.AgentTargets...)
	}
	out := all[:1:1]
	for _, t := range all[1:] {
		if t.Hot || !hot {
			out = append(out, t)
		}
	}
	return out
}

// benchProc is what `bench serve -cpuprofile` runs as its child: `relay
// <service>` (or serve) with a CPU profile of the whole process written to a
// file when it stops.
func benchProc(ctx context.Context, a *app, args []string) error {
	fs := a.flags("bench proc")
	cpuProfile := fs.String("cpuprofile", "", "CPU profile file")
	fs.StringVar(&a.busPrefix, "prefix", "", "subject and stream prefix instead of \"relay\" (a run of its own on a shared NATS server)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	svcs := sortedServices()
	if name := fs.Arg(0); name != "serve" {
		if services[name] == nil {
			return &exitError{code: 2, msg: fmt.Sprintf("bench proc: unknown service %q", name)}
		}
		svcs = []*service{services[name]}
	}
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	return a.serve(ctx, svcs)
}

// startCPUProfile starts a CPU profile into path ("" does nothing) and
// returns the function that ends it.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
