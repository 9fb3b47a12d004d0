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
	// consumers caches each consumer's collectors (a *consumerMetrics per
	// consumer name), likewise for every delivery.
	consumers sync.Map
}

// consumerMetrics are one consumer's collectors: its handling time and a
// counter per outcome (the outcome label's values, in outcomes' order).
type consumerMetrics struct {
	handleTime prometheus.Observer
	outcomes   [len(outcomes)]prometheus.Counter
}

// outcomes are the values of relay_bus_consumed_total's outcome label.
var outcomes = [...]string{"ack", "nak", "term", "skip", "returned", "held"}

// consumer returns the collectors of one consumer.
func (m *Metrics) consumer(name string) *consumerMetrics {
	if v, ok := m.consumers.Load(name); ok {
		return v.(*consumerMetrics)
	}
	cm := &consumerMetrics{handleTime: m.handleTime.WithLabelValues(name)}
	for i, o := range outcomes {
		cm.outcomes[i] = m.consumed.WithLabelValues(name, o)
	}
	v, _ := m.consumers.LoadOrStore(name, cm)
	return v.(*consumerMetrics)
}

// outcome returns the counter of outcome o.
func (cm *consumerMetrics) outcome(o string) prometheus.Counter {
	for i, name := range outcomes {
		if name == o {
			return cm.outcomes[i]
		}
	}
	panic("bus: unknown outcome " + o)
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
