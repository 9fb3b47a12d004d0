package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// ageBuckets are the age ranges of the approvals chart; the last is open.
var ageBuckets = []struct {
	Label string
	Below time.Duration
}{
	{"< 1 min", time.Minute},
	{"1-5 min", 5 * time.Minute},
	{"5-15 min", 15 * time.Minute},
	{"15-60 min", time.Hour},
	{"1-6 h", 6 * time.Hour},
	{"> 6 h", 1<<63 - 1},
}

// ageChart renders the waiting approvals by age as an SVG bar chart (no
// script, no external asset): ages are those the approvals service listed
// (the newest ones); unlisted more are older than the oldest listed.
func ageChart(ages []time.Duration, unlisted int) template.HTML {
	const w, h, top, bottom, left = 640, 130, 18, 22, 44
	counts := make([]int, len(ageBuckets))
	var oldest time.Duration
	for _, a := range ages {
		oldest = max(oldest, a)
		for i, b := range ageBuckets {
			if a < b.Below {
				counts[i]++
				break
			}
		}
	}
	peak := 0
	for _, c := range counts {
		peak = max(peak, c)
	}
	scale := float64(max(peak, 1))
	base := h - bottom
	bw := float64(w-left) / float64(len(counts))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg">`, w, h, w, h)
	title := fmt.Sprintf("Approvals waiting: %d", len(ages)+unlisted)
	if len(ages) > 0 {
		title += ", the oldest listed waits " + humanDuration(oldest)
	}
	if unlisted > 0 {
		title += fmt.Sprintf(" (%d older not listed)", unlisted)
	}
	fmt.Fprintf(&b, `<title>%s</title>`, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<text x="0" y="12" class="axis">%d</text><text x="0" y="%d" class="axis">0</text>`, peak, base)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" class="base"/>`, left, base, w, base)
	for i, c := range counts {
		x := float64(left) + float64(i)*bw
		if c > 0 {
			bh := float64(c) / scale * float64(h-top-bottom)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" class="bar age"><title>%s: %d waiting</title></rect>`,
				x+4, float64(base)-bh, bw-8, bh, template.HTMLEscapeString(ageBuckets[i].Label), c)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="axis" text-anchor="middle">%d</text>`, x+bw/2, float64(base)-bh-3, c)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">%s</text>`, x+bw/2, base+14, template.HTMLEscapeString(ageBuckets[i].Label))
	}
	if len(ages) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="axis empty" text-anchor="middle">no approval waiting</text>`, left+(w-left)/2, base/2+top/2)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from numbers and escaped labels only
}
