package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/relaystation/relay/internal/ingestbench"
)

func init() {
	registerCommand(&command{
		name:    "bench",
		usage:   "ingest",
		summary: "load-test a component on loopback (`bench ingest [-c N] [-d 5s] [-rate 1000] [-n N] [-nats URL] [-cpuprofile F]`)",
		run:     runBench,
	})
}

func runBench(ctx context.Context, a *app, args []string) error {
	if err := a.checkEnv(); err != nil {
		return err
	}
	if len(args) == 0 || args[0] != "ingest" {
		return &exitError{code: 2, msg: "usage: relay bench ingest [-c N] [-d 5s] [-rate 1000] [-n N] [-nats URL] [-cpuprofile F]"}
	}
	fs := flag.NewFlagSet("bench ingest", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	var cfg ingestbench.Config
	fs.IntVar(&cfg.Concurrency, "c", 32, "concurrent clients at saturation (at most 1024)")
	fs.DurationVar(&cfg.Duration, "d", 0, "duration of each phase (default 5s, at most 1m)")
	fs.IntVar(&cfg.Rate, "rate", 1000, "requests/s of the fixed-rate phase (at most 20000)")
	fs.IntVar(&cfg.MaxRequests, "n", 0, "cap on requests per phase (default 200000)")
	fs.StringVar(&cfg.NATSURL, "nats", "", "publish to this external NATS server (its own stream prefix, deleted after) instead of an embedded one")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the saturation phase's process to this file")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cfg.Logger = a.log
	fmt.Fprintln(a.stderr, "relay bench ingest: JetStream and gateway on 127.0.0.1, 5 phases...")
	rep, err := ingestbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Write(a.stdout)
	return nil
}
