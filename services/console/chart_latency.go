package console

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/story"
)

// The latency chart's steps, in a task's order, and the stages between
// them: stage i goes from step i to step i+1.
const (
	stepWebhook = iota
	stepSuggestion
	stepDecision
	stepComment
	steps
)

// latencyStages name the stages, in order.
var latencyStages = [steps - 1]string{"webhook → suggestion", "suggestion → decision", "decision → comment"}

// Subjects of the steps after the webhook, relative to the bus prefix.
const (
	subjectSuggestion = "agent.suggestion"
	subjectDecided    = "approval.decided"
)

const (
	// latencySlot is the width of one point of the latency chart.
	latencySlot = 5 * time.Minute
	// latencySlots is how many ended slots the chart shows before the one
	// under way: the last hour.
	latencySlots = 12
	// latencyReach is the longest stage measured: a stage ending in the
	// chart's hour counts when it started at most this long before, so the
	// streams are read from this long before the chart's first slot.
	latencyReach = time.Hour
	// latencyTasks bounds the tasks followed at once (about 150 bytes
	// each); beyond, the oldest are let go.
	latencyTasks = 200_000
)

// sample is one stage of one task: how long it took and when it ended.
type sample struct {
	end time.Time
	d   time.Duration
}

// quantiles are a slot's p50 and p99 of one stage, n the samples.
type quantiles struct {
	P50, P99 time.Duration
	N        int
}

// latencies measures a task's way from the webhook to the comment from
// the streams: the webhook is the inbound message the task started from
// (its envelope id gives the task id, envelope.TaskOf; its stream time is
// the webhook's), the suggestion the first agent.suggestion of the task
// (stream time), the decision the first approval.decided with a decided_at
// (the click, read from the message: the record itself is published after
// Slack is updated), the comment the first task.posted (stream time, after
// the post). Headers are enough for all but the decisions. The streams are
// read once (cursors), so a refresh costs what was stored since the last
// one; a restarted console reads the hour and the reach before it again.
type latencies struct {
	mu      sync.Mutex
	every   time.Duration // the least time between two reads
	read    time.Time
	in      cursor
	work    cursor
	tasks   map[string]*taskSteps
	order   []taskAt // tasks in the order first seen, to let the oldest go
	samples [steps - 1][]sample
	// shown is the view last computed; changed says samples were added or
	// let go since.
	shown   latencyView
	changed bool
}

// latencyView is what the latency chart shows: each stage's quantiles per
// slot from First (the last slot being the one under way) and over the
// whole hour.
type latencyView struct {
	First time.Time
	Slots [steps - 1][]quantiles
	Hour  [steps - 1]quantiles
}

// taskSteps are the times of a task's steps (Unix nanoseconds, 0 before
// the step), and when the task was first seen.
type taskSteps struct {
	at   [steps]int64
	seen int64
}

// taskAt is a task and when it was first seen.
type taskAt struct {
	id   string
	seen int64
}

// view reads what the streams stored since the last read and returns the
// stages' quantiles of the last hour (its slots and the one under way);
// on an error, what was read before.
func (l *latencies) view(ctx context.Context, b *bus.Bus, now time.Time) (latencyView, error) {
	first := now.Truncate(latencySlot).Add(-latencySlots * latencySlot)
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.update(ctx, b, first, now)
	if l.changed || !l.shown.First.Equal(first) {
		v := latencyView{First: first}
		for k := range v.Slots {
			v.Slots[k] = slotQuantiles(l.samples[k], first, latencySlot, latencySlots+1)
			v.Hour[k] = slotQuantiles(l.samples[k], first, (latencySlots+1)*latencySlot, 1)[0]
		}
		l.shown, l.changed = v, false
	}
	return l.shown, err
}

// update reads what the streams stored since the last read: the inbound
// stream first, so that a suggestion usually finds its webhook read (one
// stored while the inbound stream was read meets its webhook at the next
// read: a stage counts once both ends are read, in either order).
func (l *latencies) update(ctx context.Context, b *bus.Bus, first, now time.Time) error {
	if l.tasks == nil {
		l.tasks = map[string]*taskSteps{}
	}
	l.prune(first)
	if l.every > 0 && now.Sub(l.read) < l.every {
		return nil
	}
	l.read = now
	from := first.Add(-latencyReach)
	js := b.JetStream()
	err := l.in.read(ctx, js, b.StreamName(envelope.SubjectInbound), []string{b.Subject(envelope.SubjectInbound + ".>")}, from, true,
		func(msg jetstream.Msg, md *jetstream.MsgMetadata) {
			if id := msg.Headers().Get(envelope.HeaderID); id != "" {
				l.note(envelope.TaskOf(id), stepWebhook, md.Timestamp)
			}
		})
	if err != nil {
		return err
	}
	work := b.StreamName(subjectSuggestion)
	var decided []uint64
	err = l.work.read(ctx, js, work, []string{b.Subject(subjectSuggestion), b.Subject(subjectDecided), b.Subject(story.SubjectPosted)}, from, true,
		func(msg jetstream.Msg, md *jetstream.MsgMetadata) {
			task := msg.Headers().Get(envelope.HeaderTask)
			if task == "" {
				return
			}
			switch b.Relative(msg.Subject()) {
			case subjectSuggestion:
				l.note(task, stepSuggestion, md.Timestamp)
			case subjectDecided:
				decided = append(decided, md.Sequence.Stream)
			case story.SubjectPosted:
				l.note(task, stepComment, md.Timestamp)
			}
		})
	if err != nil {
		return err
	}
	if len(decided) == 0 {
		return nil
	}
	st, err := js.Stream(ctx, work)
	if err != nil {
		return err
	}
	for _, seq := range decided {
		raw, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // aged out or deleted since
		}
		if task, at := decidedAt(raw.Data); !at.IsZero() {
			l.note(task, stepDecision, at)
		}
	}
	return nil
}

// decidedAt reads an approval.decided envelope's task and meta.approval's
// decided_at (zero for an expiry: no one decided).
func decidedAt(data []byte) (string, time.Time) {
	var e struct {
		Meta struct {
			TaskID   string `json:"task_id"`
			Approval struct {
				DecidedAt time.Time `json:"decided_at"`
			} `json:"approval"`
		} `json:"meta"`
	}
	if json.Unmarshal(data, &e) != nil {
		return "", time.Time{}
	}
	return e.Meta.TaskID, e.Meta.Approval.DecidedAt
}

// note records a task's step (the first one of its kind), and the samples
// of the stages it starts or ends.
func (l *latencies) note(task string, step int, at time.Time) {
	ns := at.UnixNano()
	t, ok := l.tasks[task]
	if !ok {
		t = &taskSteps{seen: ns}
		l.tasks[task] = t
		l.order = append(l.order, taskAt{task, ns})
		if len(l.order) > latencyTasks {
			l.letGo(latencyTasks / 8) // at once: each letGo moves the rest
		}
	}
	if t.at[step] != 0 {
		return
	}
	t.at[step] = ns
	if step > 0 && t.at[step-1] != 0 {
		l.add(step-1, t.at[step-1], ns)
	}
	if step < steps-1 && t.at[step+1] != 0 {
		l.add(step, ns, t.at[step+1])
	}
}

// add records a stage from start to end; one longer than latencyReach is
// not measured, one that seems to end before it started (clocks apart)
// took no time.
func (l *latencies) add(stage int, start, end int64) {
	d := time.Duration(end - start)
	if d > latencyReach {
		return
	}
	l.samples[stage] = append(l.samples[stage], sample{end: time.Unix(0, end).UTC(), d: max(d, 0)})
	l.changed = true
}

// prune lets go of the samples before first and the tasks first seen
// before first minus the reach: no stage of the chart's hour can involve
// them.
func (l *latencies) prune(first time.Time) {
	for k := range l.samples {
		l.samples[k] = slices.DeleteFunc(l.samples[k], func(s sample) bool { return s.end.Before(first) })
	}
	cut := first.Add(-latencyReach).UnixNano()
	n := 0
	for n < len(l.order) && l.order[n].seen < cut {
		n++
	}
	l.letGo(n)
}

// letGo forgets the n tasks seen first (a task seen again after it was let
// go has a later entry of its own).
func (l *latencies) letGo(n int) {
	for _, t := range l.order[:n] {
		if cur, ok := l.tasks[t.id]; ok && cur.seen == t.seen {
			delete(l.tasks, t.id)
		}
	}
	l.order = slices.Delete(l.order, 0, n)
}

// slotQuantiles is the p50 and p99 (nearest rank) of the samples ending in
// each of n slots of width slot from first.
func slotQuantiles(samples []sample, first time.Time, slot time.Duration, n int) []quantiles {
	per := make([][]time.Duration, n)
	for _, s := range samples {
		i := int(s.end.Sub(first) / slot)
		if s.end.Before(first) || i >= n {
			continue
		}
		per[i] = append(per[i], s.d)
	}
	out := make([]quantiles, n)
	for i, ds := range per {
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		out[i] = quantiles{P50: rank(ds, 50), P99: rank(ds, 99), N: len(ds)}
	}
	return out
}

// rank is the p-th percentile of sorted ds, nearest rank: the smallest
// value with at least p% of the values at or below it.
func rank(ds []time.Duration, p int) time.Duration {
	i := (p*len(ds)+99)/100 - 1
	return ds[max(i, 0)]
}

// latencyTicks are the marks of the latency chart's logarithmic scale.
var latencyTicks = []time.Duration{
	time.Microsecond, 10 * time.Microsecond, 100 * time.Microsecond,
	time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond,
	time.Second, 10 * time.Second, time.Minute, 10 * time.Minute, time.Hour,
}

// latencyChart renders each stage's p50 (a solid line) and p99 (dashed)
// per slot as an SVG line chart on a logarithmic scale (no script, no
// external asset), the last slot being the one under way; a slot without a
// sample leaves a gap.
func latencyChart(v latencyView) template.HTML {
	stages, first := v.Slots, v.First
	const w, h, top, left, right = 640, 230, 12, 52, 8
	const base = 160
	lo, hi := time.Duration(0), time.Duration(0)
	n := 0
	for _, qs := range stages {
		for _, q := range qs {
			if q.N == 0 {
				continue
			}
			if n == 0 || q.P50 < lo {
				lo = q.P50
			}
			hi = max(hi, q.P99)
			n += q.N
		}
	}
	// The scale runs from the tick at or below the fastest p50 to the one
	// at or above the slowest p99.
	from, to := 0, 1
	for i, t := range latencyTicks {
		if t <= lo {
			from = i
		}
	}
	for to = from + 1; to < len(latencyTicks)-1 && latencyTicks[to] < hi; to++ {
	}
	logLo, logHi := math.Log(float64(latencyTicks[from])), math.Log(float64(latencyTicks[to]))
	y := func(d time.Duration) float64 {
		v := math.Log(float64(max(d, latencyTicks[from])))
		return base - (v-logLo)/(logHi-logLo)*float64(base-top)
	}
	slots := 0
	for _, qs := range stages {
		slots = max(slots, len(qs))
	}
	sw := float64(w-left-right) / float64(max(slots, 1))
	x := func(i int) float64 { return float64(left) + (float64(i)+0.5)*sw }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart latency" role="img" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg">`, w, h, w, h)
	fmt.Fprintf(&b, `<title>Latency per stage, p50 and p99 per %d minutes: %d stages measured in the last hour</title>`, int(latencySlot/time.Minute), n)
	for i := from; i <= to; i++ {
		ty := y(latencyTicks[i])
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" class="grid"/><text x="0" y="%.1f" class="axis">%s</text>`,
			left, ty, w-right, ty, ty+4, humanDuration(latencyTicks[i]))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" class="base"/>`, left, base, w-right, base)
	for k, qs := range stages {
		name := template.HTMLEscapeString(latencyStages[k])
		for _, p := range []struct {
			class string
			of    func(quantiles) time.Duration
		}{{"p50", func(q quantiles) time.Duration { return q.P50 }}, {"p99", func(q quantiles) time.Duration { return q.P99 }}} {
			// One polyline per run of slots with samples.
			var pts []string
			flush := func() {
				if len(pts) > 1 {
					fmt.Fprintf(&b, `<polyline points="%s" class="line s%d %s"/>`, strings.Join(pts, " "), k, p.class)
				}
				pts = pts[:0]
			}
			for i, q := range qs {
				if q.N == 0 {
					flush()
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(p.of(q))))
			}
			flush()
		}
		for i, q := range qs {
			if q.N == 0 {
				continue
			}
			at := first.Add(time.Duration(i) * latencySlot).UTC()
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" class="dot s%d" data-stage="%s" data-p50="%d" data-p99="%d"><title>%s %s-%s UTC: p50 %s, p99 %s (%d)</title></circle>`,
				x(i), y(q.P50), k, name, q.P50.Microseconds(), q.P99.Microseconds(), name, at.Format("15:04"), at.Add(latencySlot).Format("15:04"),
				humanDuration(q.P50), humanDuration(q.P99), q.N)
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2" class="dot p99 s%d"/>`, x(i), y(q.P99), k)
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="axis">-%d min</text><text x="%d" y="%d" class="axis" text-anchor="end">now</text>`,
		left, base+14, int(latencySlot/time.Minute)*max(slots-1, 0), w-right, base+14)
	for k := range stages {
		hq := v.Hour[k]
		ly := base + 32 + 16*k
		label := latencyStages[k] + ": none in the last hour"
		if hq.N > 0 {
			label = fmt.Sprintf("%s: p50 %s, p99 %s over the hour (%d)", latencyStages[k], humanDuration(hq.P50), humanDuration(hq.P99), hq.N)
		}
		fmt.Fprintf(&b, `<g class="legend"><line x1="%d" y1="%d" x2="%d" y2="%d" class="line s%d p50 key"/><text x="%d" y="%d" class="axis">%s</text></g>`,
			left, ly-4, left+20, ly-4, k, left+26, ly, template.HTMLEscapeString(label))
	}
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="axis empty" text-anchor="middle">no stage ended in the last hour</text>`, left+(w-left)/2, base/2+top/2)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from numbers and escaped names only
}
