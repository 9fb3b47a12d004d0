package servebench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"time"
)

// Report is the result of a run: every run of every target, in the order run.
type Report struct {
	Rate      int
	Duration  time.Duration
	BodyBytes int
	Results   []Result
}

// of returns the results of target t, in run order.
func (r *Report) of(t Target) []Result { return Of(r.Results, resultTarget, t) }

// targets are the report's targets in the order first run.
func (r *Report) targets() []Target { return Keys(r.Results, resultTarget) }

func resultTarget(r Result) Target { return r.Target }

// Of returns the elements of rs whose key is k, in order.
func Of[R any, K comparable](rs []R, key func(R) K, k K) []R {
	var out []R
	for _, r := range rs {
		if key(r) == k {
			out = append(out, r)
		}
	}
	return out
}

// Keys returns the distinct keys of rs in the order first seen.
func Keys[R any, K comparable](rs []R, key func(R) K) []K {
	var out []K
	for _, r := range rs {
		if k := key(r); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// CPURatio is, for each run, target t's CPU per 1,000 webhooks over the
// gateway alone's (the first target) in the same run.
func (r *Report) CPURatio(t Target) []float64 {
	ts := r.targets()
	if len(ts) == 0 {
		return nil
	}
	base, own := r.of(ts[0]), r.of(t)
	var out []float64
	for i := range min(len(base), len(own)) {
		if b := base[i].CPUPer1000(); b > 0 {
			out = append(out, float64(own[i].CPUPer1000())/float64(b))
		}
	}
	return out
}

// Write prints, per target, the median and range over the runs of each figure.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "signed GitHub issues webhooks (%d-byte body) at %d/s for %s per run; the relay a child process with embedded JetStream, instant fakes; median [min-max] over the runs\n",
		r.BodyBytes, r.Rate, r.Duration)
	for _, t := range r.targets() {
		rs := r.of(t)
		fmt.Fprintf(w, "\n%s (%d runs)\n", t.Name, len(rs))
		Row(w, "accepted/s", Each(rs, func(x Result) float64 { return x.Accept.PerSecond() }), "%.0f")
		Row(w, "errors", Each(rs, func(x Result) float64 { return float64(x.Accept.Errors) }), "%.0f")
		Row(w, "CPU ms per 1,000 webhooks", Each(rs, func(x Result) float64 { return ms(x.CPUPer1000()) }), "%.0f")
		if ratio := r.CPURatio(t); len(ratio) > 0 && t != r.targets()[0] {
			Row(w, "  x the gateway's, same run", ratio, "%.2f")
		}
		Row(w, "backlog when the load stopped", Each(rs, func(x Result) float64 { return float64(x.Backlog) }), "%.0f")
		Row(w, "drain s", Each(rs, func(x Result) float64 { return x.Drain.Seconds() }), "%.2f")
		Row(w, "accept p50 ms", Each(rs, func(x Result) float64 { return ms(x.Accept.P50) }), "%.2f")
		Row(w, "accept p99 ms", Each(rs, func(x Result) float64 { return ms(x.Accept.P99) }), "%.2f")
		if t.Agent {
			Row(w, "suggestions", Each(rs, func(x Result) float64 { return float64(x.Suggestions) }), "%.0f")
		}
		deliveries(w, rs)
		if t.Agent && !t.Hot {
			Row(w, "webhook->suggestion p50 ms", Each(rs, func(x Result) float64 { return ms(pct(x.Loop, 50)) }), "%.1f")
			Row(w, "webhook->suggestion p99 ms", Each(rs, func(x Result) float64 { return ms(pct(x.Loop, 99)) }), "%.1f")
		}
	}
}

// Each is f of every element of rs.
func Each[R any](rs []R, f func(R) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the p-th percentile of sorted latencies (0 when there are none).
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// Row prints name, the median and the range [min-max] of vs with the verb
// format (one line, indented by two spaces).
func Row(w io.Writer, name string, vs []float64, format string) {
	s := slices.Sorted(slices.Values(vs))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	fmt.Fprintf(w, "  %-32s "+format+"  ["+format+"-"+format+"]\n", name, med, s[0], s[len(s)-1])
}

// deliveries prints, per accepted webhook (median over the runs), the
// messages each stream stored (what the embedded server writes to disk) and
// each durable consumer was sent (the work a consumer is handed, including
// envelopes it then ignores).
func deliveries(w io.Writer, rs []Result) {
	perWebhook(w, rs, "stored/webhook ", func(r Result) map[string]uint64 { return r.Stored })
	perWebhook(w, rs, "deliveries/webhook ", func(r Result) map[string]uint64 { return r.Delivered })
}

// perWebhook prints a row per name of the counts of, each divided by the
// run's accepted webhooks.
func perWebhook(w io.Writer, rs []Result, label string, counts func(Result) map[string]uint64) {
	names := map[string]bool{}
	for _, r := range rs {
		for n := range counts(r) {
			names[n] = true
		}
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		Row(w, "  "+label+n, Each(rs, func(x Result) float64 {
			return float64(counts(x)[n]) / float64(max(1, x.Accept.Requests))
		}), "%.2f")
	}
}
