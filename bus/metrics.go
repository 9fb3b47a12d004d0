package bus

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/internal/metric"
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
		published: metric.Counters("relay_bus_published_total",
			"Envelopes published, by stream and result (ok, duplicate, invalid, error).", "stream", "result"),
		publishTime: metric.Histograms("relay_bus_publish_seconds",
			"Time from Publish to the JetStream ack.", []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}, "stream"),
		consumed: metric.Counters("relay_bus_consumed_total",
			"Messages handled, by consumer and outcome (ack, nak, term, skip, returned at shutdown).", "consumer", "outcome"),
		handleTime: metric.Histograms("relay_bus_handle_seconds",
			"Time a consumer's handler spent on a message.", prometheus.ExponentialBuckets(0.0001, 4, 10), "consumer"),
		deadLetters: metric.Counters("relay_bus_dead_letters_total",
			"Messages dead-lettered, by consumer.", "consumer"),
	}
	reg.MustRegister(m.published, m.publishTime, m.consumed, m.handleTime, m.deadLetters)
	return m
}
