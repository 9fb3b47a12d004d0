package ingest

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus collectors; nil records nothing.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	envelopes *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_ingest_requests_total",
			Help: "Webhook requests answered, by provider, route and HTTP status.",
		}, []string{"provider", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_ingest_request_seconds",
			Help:    "Time from receiving a webhook to answering it, by provider.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 3, 10},
		}, []string{"provider"}),
		envelopes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_ingest_envelopes_total",
			Help: "Envelopes acknowledged by the bus, by provider and result (stored, duplicate).",
		}, []string{"provider", "result"}),
	}
	reg.MustRegister(m.requests, m.duration, m.envelopes)
	return m
}

func (m *metrics) observe(rt *route, o outcome, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(rt.name, rt.label, strconv.Itoa(o.status)).Inc()
	m.duration.WithLabelValues(rt.name).Observe(d.Seconds())
	if o.stored > 0 {
		m.envelopes.WithLabelValues(rt.name, "stored").Add(float64(o.stored))
	}
	if o.dups > 0 {
		m.envelopes.WithLabelValues(rt.name, "duplicate").Add(float64(o.dups))
	}
}
