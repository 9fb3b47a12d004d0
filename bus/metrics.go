package bus

import (
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
}

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
