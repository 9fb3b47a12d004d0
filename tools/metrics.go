package tools

import "github.com/prometheus/client_golang/prometheus"

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
		handshake: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "relay_tool_handshake_seconds", Help: "MCP session handshake latency per server.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"server"}),
		invocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_tool_invocations_total", Help: "Tool invocations per server, tool and status (success, error, permission_denied, rate_limited, limit_exceeded, timeout, cancelled, disabled).",
		}, []string{"server", "tool", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "relay_tool_call_seconds", Help: "Tool call latency per server and tool, all outcomes.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"server", "tool"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_tool_server_ready", Help: "1 when the server's session is ready, 0 otherwise.",
		}, []string{"server"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_tool_breaker_state", Help: "Circuit breaker per server: 0 closed, 1 half-open, 2 open.",
		}, []string{"server"}),
	}
	if reg != nil {
		reg.MustRegister(m.handshake, m.invocations, m.latency, m.up, m.breaker)
	}
	return m
}
