package console

import (
	"context"
	"fmt"
	"html/template"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// chartProviders are the providers the webhook chart splits its bars by, in
// the order they are stacked.
var chartProviders = []string{"github", "slack", "sentry", "openproject"}

// providerMinutes splits the inbound stream's counts per minute by provider,
// read from the stream so it survives a console restart: the envelopes of a
// provider from a minute boundary on are the pending count of a filtered
// consumer started at that boundary's sequence (created and deleted at
// once), and a minute's count is the difference of its two boundaries.
// Only minutes with webhooks are asked, and an ended minute's split is
// remembered once its providers add up to the minute's count (a webhook
// stored between two lookups makes them differ; the next refresh asks
// again), so a refresh costs the lookups of the minute under way.
type providerMinutes struct {
	mu    sync.Mutex
	split map[time.Time][]int // ended minutes, one count per chartProviders
}

// series is one provider's counts per minute, oldest first.
type series struct {
	Name   string
	Counts []int
}

// counts returns one series per provider over the last n minutes and the
// minute under way, with the first minute's time.
func (pm *providerMinutes) counts(ctx context.Context, seqs *minuteSeqs, nc *nats.Conn, js jetstream.JetStream, stream string, subject func(string) string, now time.Time, n int) ([]series, time.Time, error) {
	bounds, first, err := seqs.bounds(ctx, nc, js, stream, now, n)
	if err != nil {
		return nil, time.Time{}, err
	}
	out := make([]series, len(chartProviders))
	for p, name := range chartProviders {
		out[p] = series{Name: name, Counts: make([]int, n+1)}
	}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if pm.split == nil {
		pm.split = map[time.Time][]int{}
	}
	for t := range pm.split {
		if t.Before(first) {
			delete(pm.split, t)
		}
	}
	end := bounds[n+1]
	// pending[seq][p]: the provider's envelopes from seq to the end.
	pending := map[uint64][]int{end: make([]int, len(chartProviders))}
	lookup := func(seq uint64) ([]int, error) {
		if v, ok := pending[seq]; ok {
			return v, nil
		}
		v := make([]int, len(chartProviders))
		for p, name := range chartProviders {
			c, err := pendingFrom(ctx, js, stream, subject("in."+name+".>"), seq)
			if err != nil {
				return nil, err
			}
			v[p] = c
		}
		pending[seq] = v
		return v, nil
	}
	// Newest boundary first: a webhook stored meanwhile can only add to an
	// older minute's count, never make one negative.
	for i := n; i >= 0; i-- {
		t := first.Add(time.Duration(i) * time.Minute)
		if bounds[i+1] <= bounds[i] {
			continue
		}
		if v, ok := pm.split[t]; ok {
			for p := range v {
				out[p].Counts[i] = v[p]
			}
			continue
		}
		to, err := lookup(bounds[i+1])
		if err != nil {
			return nil, time.Time{}, err
		}
		from, err := lookup(bounds[i])
		if err != nil {
			return nil, time.Time{}, err
		}
		v := make([]int, len(chartProviders))
		sum := 0
		for p := range v {
			v[p] = max(from[p]-to[p], 0)
			out[p].Counts[i] = v[p]
			sum += v[p]
		}
		if i < n && uint64(sum) == bounds[i+1]-bounds[i] {
			pm.split[t] = v
		}
	}
	return out, first, nil
}

// pendingFrom counts the stream's messages on subject from seq on: the
// pending count of a filtered consumer that starts there, deleted at once.
func pendingFrom(ctx context.Context, js jetstream.JetStream, stream, subject string, seq uint64) (int, error) {
	c, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       seq,
		FilterSubject:     subject,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return 0, err
	}
	info := c.CachedInfo()
	_ = js.DeleteConsumer(ctx, stream, info.Name) // InactiveThreshold removes it otherwise
	return int(info.NumPending), nil
}

// seriesColours is how many colours the stylesheet gives series (s0, s1,
// ...); more series take them again.
const seriesColours = 8

// stackedChart renders counts per minute of several series as an SVG bar
// chart with the series stacked and a legend (no script, no external
// asset), the last bar being the minute under way; a chart without a count
// says empty.
func stackedChart(title, empty string, ss []series, first time.Time) template.HTML {
	const w, h, top, bottom, left = 640, 170, 18, 40, 44
	minutes := 0
	for _, s := range ss {
		minutes = max(minutes, len(s.Counts))
	}
	totals := make([]int, minutes)
	peak, total := 0, 0
	for i := range totals {
		for _, s := range ss {
			if i < len(s.Counts) {
				totals[i] += s.Counts[i]
			}
		}
		peak = max(peak, totals[i])
		total += totals[i]
	}
	scale := float64(max(peak, 1))
	base := h - bottom
	bw := float64(w-left) / float64(max(minutes, 1))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg">`, w, h, w, h)
	fmt.Fprintf(&b, `<title>%s: %d in the last hour, at most %d in a minute</title>`, template.HTMLEscapeString(title), total, peak)
	fmt.Fprintf(&b, `<text x="0" y="12" class="axis">%d/min</text><text x="0" y="%d" class="axis">0</text>`, peak, base)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" class="base"/>`, left, base, w, base)
	for i := range minutes {
		x := float64(left) + float64(i)*bw
		y := float64(base)
		at := first.Add(time.Duration(i) * time.Minute).UTC().Format("15:04")
		for k, s := range ss {
			if i >= len(s.Counts) || s.Counts[i] == 0 {
				continue
			}
			bh := float64(s.Counts[i]) / scale * float64(h-top-bottom)
			y -= bh
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" class="bar s%d" data-series="%[6]s"><title>%[6]s %[7]s UTC: %[8]d</title></rect>`,
				x+1, y, max(bw-2, 1), bh, k%seriesColours, template.HTMLEscapeString(s.Name), at, s.Counts[i])
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="axis">-%d min</text><text x="%d" y="%d" class="axis" text-anchor="end">now</text>`,
		left, base+14, max(minutes-1, 0), w, base+14)
	x := left
	for k, s := range ss {
		sum := 0
		for _, c := range s.Counts {
			sum += c
		}
		fmt.Fprintf(&b, `<g class="legend"><rect x="%d" y="%d" width="10" height="10" class="key s%d"/><text x="%d" y="%d" class="axis">%s (%d)</text></g>`,
			x, h-11, k%seriesColours, x+14, h-2, template.HTMLEscapeString(s.Name), sum)
		x += 24 + 7*(len(s.Name)+len(fmt.Sprint(sum))+3)
	}
	if total == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="axis empty" text-anchor="middle">%s</text>`, left+(w-left)/2, base/2+top/2, template.HTMLEscapeString(empty))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from numbers and escaped names only
}
