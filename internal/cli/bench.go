package cli

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"

	"github.com/relaystation/relay/internal/ingestbench"
	"github.com/relaystation/relay/internal/servebench"
)

const benchUsage = "usage: relay bench ingest [-c N] [-d 5s] [-rate 1000] [-n N] [-nats URL] [-cpuprofile F] | relay bench serve [-rate 1000] [-d 10s] [-runs 3] [-agent] [-hot] [-baseline BIN] [-cpuprofile DIR]"

func init() {
	registerCommand(&command{
		name:    "bench",
		usage:   "ingest|serve",
		summary: "load-test on loopback: the gateway (`bench ingest`), or the gateway alone vs the whole relay (`bench serve`)",
		run:     runBench,
	})
}

func runBench(ctx context.Context, a *app, args []string) error {
	if err := a.checkEnv(); err != nil {
		return err
	}
	return subcommands{"ingest": benchIngest, "serve": benchServe, "proc": benchProc}.run(ctx, a, "bench", benchUsage, args)
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
	rep, err := ingestbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Write(a.stdout)
	return nil
}

// benchServe runs this binary as the gateway alone and as the whole relay,
// interleaved, under the same load (internal/servebench).
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
	rep, err := servebench.Run(ctx, cfg)
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
