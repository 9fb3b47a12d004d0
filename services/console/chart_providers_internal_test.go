package console

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
)

// The split per provider comes from the inbound stream: each provider's
// webhooks are counted in the last minutes, and a restarted console (new
// counters) reads the same split back from the stream.
func TestProviderMinutesFromStream(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	publish := func(subject string, n int) {
		for i := range n {
			e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, fmt.Sprintf("webhook %d", i))
			if _, err := b.Publish(t.Context(), subject, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	stream := b.StreamName("in.x")
	split := func(seqs *minuteSeqs, pm *providerMinutes) map[string]int {
		t.Helper()
		ss, _, err := pm.counts(t.Context(), seqs, b.Conn(), b.JetStream(), stream, b.Subject, time.Now(), chartMinutes)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, s := range ss {
			if len(s.Counts) != chartMinutes+1 {
				t.Fatalf("%s: %d counts", s.Name, len(s.Counts))
			}
			for i, c := range s.Counts {
				if i < len(s.Counts)-2 && c != 0 {
					t.Errorf("%s minute %d counts %d, want 0", s.Name, i, c)
				}
			}
			// The sum of the last two minutes: a minute may end between publishing and counting.
			out[s.Name] = s.Counts[len(s.Counts)-1] + s.Counts[len(s.Counts)-2]
		}
		return out
	}
	var seqs minuteSeqs
	var pm providerMinutes
	if got := split(&seqs, &pm); fmt.Sprint(got) != "map[github:0 openproject:0 sentry:0 slack:0]" {
		t.Fatalf("empty stream: %v", got)
	}
	publish("in.github.issues", 4)
	publish("in.slack.message", 2)
	publish("in.github.push", 1)
	publish("in.sentry.issue", 3)
	want := "map[github:5 openproject:0 sentry:3 slack:2]"
	if got := split(&seqs, &pm); fmt.Sprint(got) != want {
		t.Errorf("split %v, want %v", got, want)
	}
	if got := split(&seqs, &pm); fmt.Sprint(got) != want {
		t.Errorf("second refresh: split %v, want %v", got, want)
	}
	if got := split(&minuteSeqs{}, &providerMinutes{}); fmt.Sprint(got) != want {
		t.Errorf("a restarted console splits %v, want %v (read back from the stream)", got, want)
	}
	// The lookups' consumers are gone.
	noConsumersLeft(t, b, "in.x")
}

func TestStackedChart(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC)
	gh, sl := make([]int, chartMinutes+1), make([]int, chartMinutes+1)
	gh[10], sl[10], gh[60] = 30, 12, 7
	svg := string(stackedChart(`Webhooks <per> minute`, "no webhooks in the last hour", []series{{"github", gh}, {"slack", sl}}, first))
	if !strings.HasPrefix(svg, `<svg class="chart"`) || !strings.HasSuffix(svg, `</svg>`) {
		t.Fatalf("not an svg: %.80s", svg)
	}
	if n := strings.Count(svg, `class="bar `); n != 3 {
		t.Errorf("%d bars, want 3 (two stacked in minute 10, one in the minute under way)", n)
	}
	for _, want := range []string{
		"Webhooks &lt;per&gt; minute: 49 in the last hour, at most 42 in a minute",
		`data-series="github"><title>github 11:10 UTC: 30</title>`,
		`data-series="slack"><title>slack 11:10 UTC: 12</title>`,
		`<title>github 12:00 UTC: 7</title>`,
		`class="key s0"/><text x="58" y="168" class="axis">github (37)</text>`,
		"slack (12)", "42/min", "-60 min",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	if strings.Contains(svg, "no webhooks") {
		t.Error("a chart with data says it is empty")
	}
	if strings.Contains(svg, "<script") || strings.Contains(svg, "href=") {
		t.Error("the chart fetches or runs something")
	}
	empty := string(stackedChart("Webhooks per minute", "no webhooks in the last hour", []series{{"github", make([]int, chartMinutes+1)}}, first))
	if strings.Contains(empty, `class="bar `) || !strings.Contains(empty, "no webhooks in the last hour") || !strings.Contains(empty, "github (0)") {
		t.Errorf("empty chart: %s", empty)
	}
}
