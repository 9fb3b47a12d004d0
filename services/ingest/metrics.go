package ingest

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus collectors; nil records nothing.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	envelopes *prometheus.CounterVec

	// routes caches each route's collectors (*route -> *routeMetrics): the
	// label lookups are done once, not on every webhook.
	routes sync.Map
}

// routeMetrics are one route's collectors; ok counts its 200 answers.
type routeMetrics struct {
	ok, stored, dups prometheus.Counter
	duration         prometheus.Observer
}

func (m *metrics) route(rt *route) *routeMetrics {
	if v, ok := m.routes.Load(rt); ok {
		return v.(*routeMetrics)
	}
	rm := &routeMetrics{
		ok:       m.requests.WithLabelValues(rt.name, rt.label, strconv.Itoa(http.StatusOK)),
		stored:   m.envelopes.WithLabelValues(rt.name, "stored"),
		dups:     m.envelopes.WithLabelValues(rt.name, "duplicate"),
		duration: m.duration.WithLabelValues(rt.name),
	}
	v, _ := m.routes.LoadOrStore(rt, rm)
	return v.(*routeMetrics)
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
	rm := m.route(rt)
	if o.status == http.StatusOK {
		rm.ok.Inc()
	} else {
		m.requests.WithLabelValues(rt.name, rt.label, strconv.Itoa(o.status)).Inc()
	}
	rm.duration.Observe(d.Seconds())
	if o.stored > 0 {
		rm.stored.Add(float64(o.stored))
	}
	if o.dups > 0 {
		rm.dups.Add(float64(o.dups))
	}
}
