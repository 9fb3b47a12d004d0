package tools

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestObserveCountsEveryCall: the kept series and the looked-up ones count
// alike, per status; made-up tool names are counted but not kept.
func TestObserveCountsEveryCall(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.observe("s", "t", StatusError, time.Millisecond, true)
	for range 3 {
		m.observe("s", "t", StatusSuccess, time.Millisecond, true)
	}
	m.observe("s", "t", StatusTimeout, time.Second, true)
	m.observe("s", "nope", StatusError, 0, false)
	for _, c := range []struct {
		name, tool, status string
		want               float64
	}{
		{"relay_tool_invocations_total", "t", "success", 3},
		{"relay_tool_invocations_total", "t", "error", 1},
		{"relay_tool_invocations_total", "t", "timeout", 1},
		{"relay_tool_invocations_total", "nope", "error", 1},
		{"relay_tool_call_seconds", "t", "", 5},
		{"relay_tool_call_seconds", "nope", "", 1},
	} {
		labels := map[string]string{"server": "s", "tool": c.tool}
		if c.status != "" {
			labels["status"] = c.status
		}
		if got := counterValue(t, reg, c.name, labels); got != c.want {
			t.Errorf("%s %v: got %v, want %v", c.name, labels, got, c.want)
		}
	}
	if _, kept := m.calls[seriesKey{"s", "nope"}]; kept || len(m.calls) != 1 {
		t.Errorf("kept series: got %v, want only s.t", m.calls)
	}
}
