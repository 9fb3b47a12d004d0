package gatewaybench

import (
	"fmt"
	"io"
	"time"

	"github.com/relaystation/relay/internal/bench/servebench"
)

// Report is the result of a run: every run of every target, in the order run.
type Report struct {
	Concurrency int
	Rate        int
	Duration    time.Duration
	BodyBytes   int
	Bus         string // the NATS server's URL, credentials redacted
	// Prefix is the run's subject prefix; its streams are named after it.
	Prefix  string
	Results []Result
}

// of returns the results of target name, in run order.
func (r *Report) of(name string) []Result { return servebench.Of(r.Results, resultTarget, name) }

// targets are the report's target names in the order first run.
func (r *Report) targets() []string { return servebench.Keys(r.Results, resultTarget) }

func resultTarget(r Result) string { return r.Target }

// Ratios are, run by run, the first target's figure over target other's:
// webhooks/s at saturation and CPU per 1,000 webhooks at saturation.
func (r *Report) Ratios(other string) (throughput, cpu []float64) {
	ts := r.targets()
	if len(ts) == 0 {
		return nil, nil
	}
	a, b := r.of(ts[0]), r.of(other)
	for i := range min(len(a), len(b)) {
		if x := b[i].Saturation.PerSecond(); x > 0 {
			throughput = append(throughput, a[i].Saturation.PerSecond()/x)
		}
		if x := b[i].Saturation.CPUPer1000(); x > 0 {
			cpu = append(cpu, float64(a[i].Saturation.CPUPer1000())/float64(x))
		}
	}
	return throughput, cpu
}

// Write prints, per target, the median and range over the runs of each
// figure, then the ratios.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "signed GitHub issues webhooks (%d-byte body) over loopback HTTP, NATS server at %s; saturation: %d concurrent clients for %s; fixed rate: %d/s for %s; CPU is the server process's own (user + system); median [min-max] over the runs\n",
		r.BodyBytes, r.Bus, r.Concurrency, r.Duration, r.Rate, r.Duration)
	for _, name := range r.targets() {
		rs := r.of(name)
		fmt.Fprintf(w, "\n%s (%d runs)\n", name, len(rs))
		servebench.Row(w, "webhooks/s at saturation", servebench.Each(rs, func(x Result) float64 { return x.Saturation.PerSecond() }), "%.0f")
		servebench.Row(w, "CPU ms per 1,000 at saturation", servebench.Each(rs, func(x Result) float64 { return ms(x.Saturation.CPUPer1000()) }), "%.1f")
		servebench.Row(w, "errors at saturation", servebench.Each(rs, func(x Result) float64 { return float64(x.Saturation.Errors) }), "%.0f")
		servebench.Row(w, fmt.Sprintf("p50 ms at %d/s", r.Rate), servebench.Each(rs, func(x Result) float64 { return ms(x.FixedRate.P50) }), "%.2f")
		servebench.Row(w, fmt.Sprintf("p99 ms at %d/s", r.Rate), servebench.Each(rs, func(x Result) float64 { return ms(x.FixedRate.P99) }), "%.2f")
		servebench.Row(w, fmt.Sprintf("CPU ms per 1,000 at %d/s", r.Rate), servebench.Each(rs, func(x Result) float64 { return ms(x.FixedRate.CPUPer1000()) }), "%.1f")
		servebench.Row(w, fmt.Sprintf("errors at %d/s", r.Rate), servebench.Each(rs, func(x Result) float64 { return float64(x.FixedRate.Errors) }), "%.0f")
	}
	ts := r.targets()
	for _, other := range ts[min(1, len(ts)):] {
		tp, cpu := r.Ratios(other)
		if len(tp) == 0 || len(cpu) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s over %s, run by run\n", ts[0], other)
		servebench.Row(w, "webhooks/s at saturation", tp, "%.2f")
		servebench.Row(w, "CPU per webhook at saturation", cpu, "%.2f")
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
