package tools

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/internal/metric"
)

// metrics are the runner's Prometheus series, per server and tool.
type metrics struct {
	handshake   *prometheus.HistogramVec
	invocations *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	up          *prometheus.GaugeVec
	breaker     *prometheus.GaugeVec

	// calls are the series of the tools calls reached, resolved once.
	callsMu sync.RWMutex
	calls   map[seriesKey]*callSeries
}

type seriesKey struct{ server, tool string }

// callSeries are one server.tool's latency series and, once a call
// succeeded, its success count.
type callSeries struct {
	latency prometheus.Observer
	success atomic.Pointer[prometheus.Counter]
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		handshake: metric.Histograms("relay_tool_handshake_seconds",
			"MCP session handshake latency per server.", []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}, "server"),
		invocations: metric.Counters("relay_tool_invocations_total",
			"Tool invocations per server, tool and status (success, error, permission_denied, rate_limited, limit_exceeded, timeout, cancelled, disabled).", "server", "tool", "status"),
		latency: metric.Histograms("relay_tool_call_seconds",
			"Tool call latency per server and tool, all outcomes.", []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}, "server", "tool"),
		up: metric.Gauges("relay_tool_server_ready",
			"1 when the server's session is ready, 0 otherwise.", "server"),
		breaker: metric.Gauges("relay_tool_breaker_state",
			"Circuit breaker per server: 0 closed, 1 half-open, 2 open.", "server"),
	}
	if reg != nil {
		reg.MustRegister(m.handshake, m.invocations, m.latency, m.up, m.breaker)
	}
	m.calls = map[seriesKey]*callSeries{}
	return m
}

// observe counts a call of server.tool with its status and latency. known
// says the call reached its server (the tool exists): its series are then
// resolved once and kept; others are looked up each time, so tool names a
// caller made up are not kept.
func (m *metrics) observe(server, tool string, st Status, d time.Duration, known bool) {
	if !known {
		m.invocations.WithLabelValues(server, tool, string(st)).Inc()
		m.latency.WithLabelValues(server, tool).Observe(d.Seconds())
		return
	}
	s := m.series(server, tool)
	if st != StatusSuccess {
		m.invocations.WithLabelValues(server, tool, string(st)).Inc()
	} else if c := s.success.Load(); c != nil {
		(*c).Inc()
	} else {
		c := m.invocations.WithLabelValues(server, tool, string(st))
		s.success.Store(&c)
		c.Inc()
	}
	s.latency.Observe(d.Seconds())
}

func (m *metrics) series(server, tool string) *callSeries {
	k := seriesKey{server, tool}
	m.callsMu.RLock()
	s := m.calls[k]
	m.callsMu.RUnlock()
	if s != nil {
		return s
	}
	m.callsMu.Lock()
	defer m.callsMu.Unlock()
	if s = m.calls[k]; s == nil {
		s = &callSeries{latency: m.latency.WithLabelValues(server, tool)}
		m.calls[k] = s
	}
	return s
}
