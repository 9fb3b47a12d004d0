package console

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// humanDuration formats a duration for people: 850 µs, 27 ms, 1.2 s, 3m4s,
// 10m, 1h.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Round(time.Microsecond)/time.Microsecond)
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Round(time.Millisecond)/time.Millisecond)
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	s := d.Round(time.Second).String() // 3m4s, 2m0s, 1h0m0s
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// chartMinutes is how far back the overview's webhook chart reaches.
const chartMinutes = 60

// minuteSeqs counts the inbound stream's envelopes per minute from the
// stream itself, so the chart survives a console restart: the first
// sequence stored at or after each minute boundary (one lookup per boundary,
// remembered, so a refresh costs one stream info and at most the lookups of
// the minutes that ended since), and the difference of two boundaries is
// that minute's count.
type minuteSeqs struct {
	mu   sync.Mutex
	seqs map[time.Time]uint64
}

// counts returns the envelopes stored in each of the last n minutes before
// now's minute, oldest first, and the current minute's so far (n+1 values),
// with the first boundary's time.
func (m *minuteSeqs) counts(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, now time.Time, n int) ([]int, time.Time, error) {
	bounds, first, err := m.bounds(ctx, nc, js, stream, now, n)
	if err != nil {
		return nil, time.Time{}, err
	}
	out := make([]int, n+1)
	for i := range out {
		if bounds[i+1] > bounds[i] {
			out[i] = int(bounds[i+1] - bounds[i])
		}
	}
	return out, first, nil
}

// bounds returns the first sequence stored at or after each of the n+1
// minute boundaries from the first one, and the stream's next sequence
// (n+2 values), with the first boundary's time.
func (m *minuteSeqs) bounds(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, now time.Time, n int) ([]uint64, time.Time, error) {
	info, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, time.Time{}, err
	}
	state := info.CachedInfo().State
	end := state.LastSeq + 1
	first := now.Truncate(time.Minute).Add(-time.Duration(n) * time.Minute)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seqs == nil {
		m.seqs = map[time.Time]uint64{}
	}
	for t := range m.seqs {
		if t.Before(first) {
			delete(m.seqs, t)
		}
	}
	bounds := make([]uint64, n+2)
	for i := 0; i <= n; i++ {
		t := first.Add(time.Duration(i) * time.Minute)
		seq, ok := m.seqs[t]
		if !ok {
			seq, err = firstSeqAt(ctx, nc, js, stream, t, end)
			if err != nil {
				return nil, time.Time{}, err
			}
			if seq < end { // a boundary past the last message may still move
				m.seqs[t] = seq
			}
		}
		bounds[i] = seq
	}
	bounds[n+1] = end
	return bounds, first, nil
}

// firstSeqAt is the sequence of the first message stored at or after t, or
// end when there is none.
func firstSeqAt(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, stream string, t time.Time, end uint64) (uint64, error) {
	req, _ := json.Marshal(map[string]any{"start_time": t.UTC(), "no_hdr": true})
	prefix := cmp.Or(js.Options().APIPrefix, jetstream.DefaultAPIPrefix)
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	subj := prefix + "STREAM.MSG.GET." + stream
	msg, err := nc.RequestWithContext(ctx, subj, req)
	if err != nil {
		return 0, err
	}
	var resp struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, err
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return end, nil
	case resp.Error != nil:
		return 0, errors.New(resp.Error.Description)
	case resp.Message == nil:
		return 0, errors.New("stream message get: empty answer")
	}
	return resp.Message.Seq, nil
}

// barChart renders counts per minute as an SVG bar chart (no script, no
// external asset), the last bar being the minute under way.
func barChart(title string, counts []int, first time.Time) template.HTML {
	const w, h, top, bottom, left = 640, 150, 18, 20, 44
	peak := 0
	total := 0
	for _, c := range counts {
		peak = max(peak, c)
		total += c
	}
	scale := max(peak, 1)
	bw := float64(w-left) / float64(max(len(counts), 1))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg">`, w, h, w, h)
	fmt.Fprintf(&b, `<title>%s: %d in the last hour, at most %d in a minute</title>`, template.HTMLEscapeString(title), total, peak)
	fmt.Fprintf(&b, `<text x="%d" y="12" class="axis">%d/min</text><text x="%d" y="%d" class="axis">0</text>`, 0, peak, 0, h-bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" class="base"/>`, left, h-bottom, w, h-bottom)
	for i, c := range counts {
		bh := float64(c) / float64(scale) * float64(h-top-bottom)
		x := float64(left) + float64(i)*bw
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" class="bar"><title>%s UTC: %d</title></rect>`,
			x+1, float64(h-bottom)-bh, max(bw-2, 1), bh, first.Add(time.Duration(i)*time.Minute).UTC().Format("15:04"), c)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" class="axis">-%d min</text><text x="%d" y="%d" class="axis" text-anchor="end">now</text>`,
		left, h-4, len(counts)-1, w, h-4)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from numbers and an escaped title only
}
