package tools

import (
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
	return m
}
