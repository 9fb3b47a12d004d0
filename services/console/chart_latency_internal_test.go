package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/story"
)

// The latency chart's stages come from the streams: the webhook's and the
// suggestion's and comment's stream times, the decision's decided_at. A
// stage counts once both its ends are read, in whichever order they were
// stored; a restarted console reads the same back.
func TestLatencyFromStreams(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	// stored publishes e on subject and returns the time the stream stored it.
	stored := func(subject string, e *envelope.Envelope) time.Time {
		t.Helper()
		res, err := b.Publish(t.Context(), subject, e)
		if err != nil {
			t.Fatal(err)
		}
		st, err := b.JetStream().Stream(t.Context(), res.Stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetMsg(t.Context(), res.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		return m.Time
	}
	webhook := func() (string, time.Time) {
		e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "issue opened")
		return envelope.TaskOf(e.ID), stored("in.github.issues", e)
	}
	step := func(task, subject string, meta map[string]any) time.Time {
		e := envelope.New(envelope.ChannelGitHub, envelope.RoleAssistant, subject)
		e.Meta.TaskID = task
		for k, v := range meta {
			e.Meta.Set(k, v)
		}
		return stored(subject, e)
	}
	decided := func(task string, at time.Time) time.Time {
		a := map[string]any{"status": "approved", "decided_by": "U1"}
		if !at.IsZero() {
			a["decided_at"] = at.UTC().Format(time.RFC3339Nano)
		}
		return step(task, "approval.decided", map[string]any{"approval": a})
	}
	// want collects the expected samples per stage, by their end.
	var want [steps - 1][]sample
	expect := func(stage int, start, end time.Time) {
		want[stage] = append(want[stage], sample{end: end, d: max(end.Sub(start), 0)})
	}

	// Task a goes the whole way; its decision record is stored after the
	// comment, as it may be (the record follows the Slack update).
	a, aw := webhook()
	as := step(a, "agent.suggestion", nil)
	expect(0, aw, as)
	ac := step(a, story.SubjectPosted, nil)
	ad := as.Add(ac.Sub(as) / 3)
	decided(a, ad)
	expect(1, as, ad)
	expect(2, ad, ac)
	// Task b has a suggestion waiting.
	bID, bw := webhook()
	bs := step(bID, "agent.suggestion", nil)
	expect(0, bw, bs)
	// Task c: decided by the approvals service's clock, then a second
	// suggestion and a second comment that count for nothing.
	c, cw := webhook()
	cs := step(c, "agent.suggestion", nil)
	expect(0, cw, cs)
	cd := time.Now()
	decided(c, cd)
	expect(1, cs, cd)
	step(c, "agent.suggestion", nil)
	cc := step(c, story.SubjectPosted, nil)
	expect(2, cd, cc)
	step(c, story.SubjectPosted, nil)
	// Task d expired (no decided_at) and task e's comment is a notice with
	// no decision: no stage after their suggestions.
	d, dw := webhook()
	ds := step(d, "agent.suggestion", nil)
	expect(0, dw, ds)
	decided(d, time.Time{})
	e, ew := webhook()
	es := step(e, "agent.suggestion", nil)
	expect(0, ew, es)
	step(e, story.SubjectPosted, nil)

	now := time.Now()
	first := now.Truncate(latencySlot).Add(-latencySlots * latencySlot)
	check := func(name string, l *latencies) {
		t.Helper()
		v, err := l.view(t.Context(), b, now)
		if err != nil {
			t.Fatal(err)
		}
		if !v.First.Equal(first) {
			t.Errorf("%s: first slot %v, want %v", name, v.First, first)
		}
		for k := range want {
			if got, w := fmt.Sprint(v.Slots[k]), fmt.Sprint(expected(want[k], first, latencySlots+1)); got != w {
				t.Errorf("%s: %s per slot\n got %s\nwant %s", name, latencyStages[k], got, w)
			}
		}
	}
	var l latencies
	check("first read", &l)
	check("second read (nothing new)", &l)
	check("a restarted console", &latencies{})

	// Task b is decided later: the next read adds its stage.
	bd := time.Now()
	decided(bID, bd)
	expect(1, bs, bd)
	now = time.Now()
	first = now.Truncate(latencySlot).Add(-latencySlots * latencySlot)
	check("after b's decision", &l)

	noConsumersLeft(t, b, "in.x", "task.x")
}

// expected is the p50 and p99 (the smallest value with at least 50% / 99%
// of the slot's values at or below it) of the samples per slot.
func expected(ss []sample, first time.Time, n int) []quantiles {
	out := make([]quantiles, n)
	for i := range out {
		var ds []time.Duration
		for _, s := range ss {
			if !s.end.Before(first.Add(time.Duration(i)*latencySlot)) && s.end.Before(first.Add(time.Duration(i+1)*latencySlot)) {
				ds = append(ds, s.d)
			}
		}
		if len(ds) == 0 {
			continue
		}
		// Sort by selection, not by the code under test.
		for x := range ds {
			for y := x + 1; y < len(ds); y++ {
				if ds[y] < ds[x] {
					ds[x], ds[y] = ds[y], ds[x]
				}
			}
		}
		at := func(p float64) time.Duration {
			for j := range ds {
				if float64(j+1) >= p*float64(len(ds)) {
					return ds[j]
				}
			}
			return ds[len(ds)-1]
		}
		out[i] = quantiles{P50: at(0.5), P99: at(0.99), N: len(ds)}
	}
	return out
}

func TestSlotQuantiles(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)
	var ss []sample
	// Slot 0: 1..100 ms; slot 2: 7 ms and 3 s; one before first and one
	// past the last slot.
	for i := 100; i >= 1; i-- {
		ss = append(ss, sample{end: first.Add(time.Duration(i) * time.Second), d: time.Duration(i) * time.Millisecond})
	}
	ss = append(ss,
		sample{end: first.Add(2*latencySlot + time.Minute), d: 3 * time.Second},
		sample{end: first.Add(2 * latencySlot), d: 7 * time.Millisecond},
		sample{end: first.Add(-time.Nanosecond), d: time.Hour},
		sample{end: first.Add(3 * latencySlot), d: time.Hour})
	got := slotQuantiles(ss, first, latencySlot, 3)
	want := []quantiles{{50 * time.Millisecond, 99 * time.Millisecond, 100}, {}, {7 * time.Millisecond, 3 * time.Second, 2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	one := slotQuantiles(ss[:1], first, latencySlot, 1)
	if one[0] != (quantiles{100 * time.Millisecond, 100 * time.Millisecond, 1}) {
		t.Errorf("one sample: %v", one)
	}
}

// Stages are measured once per task, from the first step of each kind, in
// whichever order the steps are read; a stage longer than the reach is not
// measured; the oldest tasks are let go.
func TestLatencyNote(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)
	l := latencies{tasks: map[string]*taskSteps{}}
	l.note("a", stepComment, t0.Add(9*time.Second))
	l.note("a", stepWebhook, t0)
	l.note("a", stepDecision, t0.Add(5*time.Second))
	l.note("a", stepSuggestion, t0.Add(2*time.Second))
	l.note("a", stepSuggestion, t0.Add(3*time.Second)) // a second round
	l.note("b", stepSuggestion, t0)
	l.note("b", stepDecision, t0.Add(latencyReach+time.Second)) // too long
	l.note("c", stepDecision, t0.Add(time.Second))
	l.note("c", stepComment, t0) // clocks apart
	got := fmt.Sprint(l.samples)
	want := fmt.Sprint([steps - 1][]sample{
		{{t0.Add(2 * time.Second), 2 * time.Second}},
		{{t0.Add(5 * time.Second), 3 * time.Second}},
		{{t0.Add(9 * time.Second), 4 * time.Second}, {t0, 0}},
	})
	if got != want {
		t.Errorf("samples\n got %s\nwant %s", got, want)
	}
	// Pruning at a first slot an hour and 10 s after t0 lets go of the
	// samples before it and of the tasks seen before the reach (a at 9 s).
	l.note("d", stepWebhook, t0.Add(2*time.Hour))
	l.prune(t0.Add(latencyReach + 10*time.Second))
	if len(l.tasks) != 1 || l.tasks["d"] == nil || len(l.order) != 1 {
		t.Errorf("after pruning: tasks %v, order %v", l.tasks, l.order)
	}
	for k, s := range l.samples {
		if len(s) != 0 {
			t.Errorf("stage %d keeps %v", k, s)
		}
	}
	// Beyond latencyTasks, the oldest are let go.
	for i := range latencyTasks + 1 {
		l.note(fmt.Sprint("t", i), stepWebhook, t0.Add(2*time.Hour))
	}
	if _, ok := l.tasks["d"]; ok || len(l.tasks) > latencyTasks {
		t.Errorf("%d tasks followed (d among them: %v), want at most %d without the oldest", len(l.tasks), ok, latencyTasks)
	}
	if _, ok := l.tasks[fmt.Sprint("t", latencyTasks)]; !ok {
		t.Error("the newest task was let go")
	}
}

func TestLatencyChart(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)
	v := latencyView{First: first}
	for k := range v.Slots {
		v.Slots[k] = make([]quantiles, latencySlots+1)
	}
	v.Slots[0][1] = quantiles{1200 * time.Millisecond, 3400 * time.Millisecond, 20}
	v.Slots[0][2] = quantiles{900 * time.Millisecond, 2 * time.Second, 5}
	v.Slots[0][4] = quantiles{time.Second, time.Second, 1}
	v.Slots[2][12] = quantiles{27 * time.Millisecond, 27 * time.Millisecond, 1}
	v.Hour[0] = quantiles{time.Second, 3400 * time.Millisecond, 26}
	v.Hour[2] = quantiles{27 * time.Millisecond, 27 * time.Millisecond, 1}
	svg := string(latencyChart(v))
	if !strings.HasPrefix(svg, `<svg class="chart latency"`) || !strings.HasSuffix(svg, `</svg>`) {
		t.Fatalf("not an svg: %.80s", svg)
	}
	for _, want := range []string{
		"<title>Latency per stage, p50 and p99 per 5 minutes: 27 stages measured in the last hour</title>",
		`data-stage="webhook → suggestion" data-p50="1200000" data-p99="3400000"><title>webhook → suggestion 11:05-11:10 UTC: p50 1.2 s, p99 3.4 s (20)</title>`,
		`data-stage="decision → comment" data-p50="27000" data-p99="27000"><title>decision → comment 12:00-12:05 UTC: p50 27 ms, p99 27 ms (1)</title>`,
		"webhook → suggestion: p50 1.0 s, p99 3.4 s over the hour (26)",
		"suggestion → decision: none in the last hour",
		// The scale: from 10 ms (below 27 ms) to 10 s (above 3.4 s).
		`class="axis">10 ms</text>`, `class="axis">10.0 s</text>`, "-60 min",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	for _, absent := range []string{`class="axis">1 ms</text>`, `class="axis">1m</text>`, "no stage ended", "<script", "href="} {
		if strings.Contains(svg, absent) {
			t.Errorf("svg has %q", absent)
		}
	}
	// Slots 1-2 make one line each for p50 and p99; slot 4 alone makes a
	// dot, no line; the gap at slot 3 breaks the line.
	if n := strings.Count(svg, `class="line s0 p50"`); n != 1 {
		t.Errorf("%d p50 lines of the first stage, want 1", n)
	}
	if n := strings.Count(svg, `class="line s0 p99"`); n != 1 {
		t.Errorf("%d p99 lines of the first stage, want 1", n)
	}
	if n := strings.Count(svg, `data-stage=`); n != 4 {
		t.Errorf("%d points, want 4", n)
	}
	empty := string(latencyChart(latencyView{First: first, Slots: [steps - 1][]quantiles{make([]quantiles, 13), make([]quantiles, 13), make([]quantiles, 13)}}))
	if !strings.Contains(empty, "no stage ended in the last hour") || strings.Contains(empty, "data-stage") {
		t.Errorf("empty chart: %s", empty)
	}
}

// noConsumersLeft fails t when a chart left a consumer on the streams of
// the relative subjects.
func noConsumersLeft(t *testing.T, b *bus.Bus, subjects ...string) {
	t.Helper()
	for _, subj := range subjects {
		info, err := b.JetStream().Stream(t.Context(), b.StreamName(subj))
		if err != nil {
			t.Fatal(err)
		}
		if n := info.CachedInfo().State.Consumers; n != 0 {
			t.Errorf("%d consumers left on %s", n, b.StreamName(subj))
		}
	}
}
