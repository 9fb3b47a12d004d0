package bus

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the bus's Prometheus collectors. Create one per registry with
// NewMetrics and share it between Bus values.
type Metrics struct {
	published   *prometheus.CounterVec
	publishTime *prometheus.HistogramVec
	consumed    *prometheus.CounterVec
	handleTime  *prometheus.HistogramVec
	deadLetters *prometheus.CounterVec

	// streams caches each stream's publish collectors (a *streamMetrics per
	// stream name): the label lookup is done once, not on every publish.
	streams sync.Map
}

// streamMetrics are one stream's publish collectors.
type streamMetrics struct {
	ok, duplicate, invalid, failed prometheus.Counter
	publishTime                    prometheus.Observer
}

// stream returns the publish collectors of one stream.
func (m *Metrics) stream(name string) *streamMetrics {
	if v, ok := m.streams.Load(name); ok {
		return v.(*streamMetrics)
	}
	sm := &streamMetrics{
		ok:          m.published.WithLabelValues(name, "ok"),
		duplicate:   m.published.WithLabelValues(name, "duplicate"),
		invalid:     m.published.WithLabelValues(name, "invalid"),
		failed:      m.published.WithLabelValues(name, "error"),
		publishTime: m.publishTime.WithLabelValues(name),
	}
	v, _ := m.streams.LoadOrStore(name, sm)
	return v.(*streamMetrics)
}

// count returns the counter of one publish result.
func (sm *streamMetrics) count(result string) prometheus.Counter {
	switch result {
	case resultOK:
		return sm.ok
	case resultDuplicate:
		return sm.duplicate
	case resultInvalid:
		return sm.invalid
	}
	return sm.failed
}

// Publish results, the "result" label of relay_bus_published_total.
const (
	resultOK        = "ok"
	resultDuplicate = "duplicate"
	resultInvalid   = "invalid"
	resultError     = "error"
)

// NewMetrics registers the bus collectors with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_bus_published_total",
			Help: "Envelopes published, by stream and result (ok, duplicate, invalid, error).",
		}, []string{"stream", "result"}),
		publishTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_bus_publish_seconds",
			Help:    "Time from Publish to the JetStream ack.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"stream"}),
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_bus_consumed_total",
			Help: "Messages handled, by consumer and outcome (ack, nak, term, skip, returned at shutdown).",
		}, []string{"consumer", "outcome"}),
		handleTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_bus_handle_seconds",
			Help:    "Time a consumer's handler spent on a message.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"consumer"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_bus_dead_letters_total",
			Help: "Messages dead-lettered, by consumer.",
		}, []string{"consumer"}),
	}
	reg.MustRegister(m.published, m.publishTime, m.consumed, m.handleTime, m.deadLetters)
	return m
}
