package console

import (
	"strings"
	"testing"
	"time"
)

func TestAgeChart(t *testing.T) {
	t.Parallel()
	ages := []time.Duration{20 * time.Second, 40 * time.Second, 3 * time.Minute, 2 * time.Hour}
	svg := string(ageChart(ages, 2))
	if !strings.HasPrefix(svg, `<svg class="chart"`) || !strings.HasSuffix(svg, `</svg>`) {
		t.Fatalf("not an svg: %.80s", svg)
	}
	if n := strings.Count(svg, `class="bar age"`); n != 3 {
		t.Errorf("%d bars, want 3", n)
	}
	for _, want := range []string{
		"Approvals waiting: 6, the oldest listed waits 2h (2 older not listed)",
		"<title>&lt; 1 min: 2 waiting</title>", "<title>1-5 min: 1 waiting</title>", "<title>1-6 h: 1 waiting</title>", "&gt; 6 h",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("svg lacks %q", want)
		}
	}
	if strings.Contains(svg, "no approval waiting") || strings.Contains(svg, "<script") {
		t.Error("a chart with data says it is empty, or runs something")
	}
	empty := string(ageChart(nil, 0))
	if strings.Contains(empty, `class="bar age"`) || !strings.Contains(empty, "no approval waiting") || !strings.Contains(empty, "Approvals waiting: 0</title>") {
		t.Errorf("empty chart: %s", empty)
	}
}
