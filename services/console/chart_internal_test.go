package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
)

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		850 * time.Microsecond:     "850 µs",
		27439738 * time.Nanosecond: "27 ms",
		1200 * time.Millisecond:    "1.2 s",
		59 * time.Second:           "59.0 s",
		184 * time.Second:          "3m4s",
		190 * time.Second:          "3m10s",
		10 * time.Minute:           "10m",
		time.Hour:                  "1h",
		70 * time.Minute:           "1h10m",
		time.Hour + time.Second:    "1h0m1s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// The chart's counts come from the inbound stream: what was published is
// counted in the last minutes, the minutes before are empty, and a new
// counter (a restarted console) reads the same from the stream.
func TestInboundPerMinuteFromStream(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	publish := func(n int) {
		for i := range n {
			e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, fmt.Sprintf("webhook %d", i))
			if _, err := b.Publish(t.Context(), "in.github.issues", e); err != nil {
				t.Fatal(err)
			}
		}
	}
	stream := b.StreamName("in.x")
	count := func(m *minuteSeqs) []int {
		t.Helper()
		c, first, err := m.counts(t.Context(), b.Conn(), b.JetStream(), stream, time.Now(), chartMinutes)
		if err != nil {
			t.Fatal(err)
		}
		if len(c) != chartMinutes+1 || time.Since(first) < chartMinutes*time.Minute {
			t.Fatalf("%d counts from %v", len(c), first)
		}
		return c
	}
	// The sum of the last two minutes: a minute may end between publishing and counting.
	recent := func(c []int) int { return c[len(c)-1] + c[len(c)-2] }
	var m minuteSeqs
	if c := count(&m); recent(c) != 0 {
		t.Fatalf("empty stream: %v", c)
	}
	publish(5)
	c := count(&m)
	if recent(c) != 5 {
		t.Errorf("after 5 webhooks: last minutes %v", c[len(c)-2:])
	}
	for i, n := range c[:len(c)-2] {
		if n != 0 {
			t.Errorf("minute %d counts %d, want 0", i, n)
		}
	}
	publish(3)
	if got := recent(count(&m)); got != 8 {
		t.Errorf("after 8 webhooks, the remembered boundaries count %d", got)
	}
	var restarted minuteSeqs
	if got := recent(count(&restarted)); got != 8 {
		t.Errorf("a restarted console counts %d, want 8 (read back from the stream)", got)
	}
}

func TestBarChart(t *testing.T) {
	t.Parallel()
	counts := make([]int, chartMinutes+1)
	counts[10], counts[60] = 42, 7
	first := time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)
	svg := string(barChart(`Webhooks <per> minute`, counts, first))
	if !strings.HasPrefix(svg, `<svg class="chart"`) || !strings.HasSuffix(svg, `</svg>`) {
		t.Fatalf("not an svg: %.80s", svg)
	}
	if n := strings.Count(svg, `class="bar"`); n != chartMinutes+1 {
		t.Errorf("%d bars, want %d", n, chartMinutes+1)
	}
	for _, want := range []string{"Webhooks &lt;per&gt; minute: 49 in the last hour, at most 42 in a minute", "<title>11:10 UTC: 42</title>", "42/min", "-60 min"} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	if strings.Contains(svg, "<script") || strings.Contains(svg, "href=") {
		t.Error("the chart fetches or runs something")
	}
}
