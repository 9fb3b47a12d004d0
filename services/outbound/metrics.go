package outbound

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/internal/metric"
)

// metrics are the worker's Prometheus collectors, by destination.
type metrics struct {
	posted     *prometheus.CounterVec
	failed     *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	notices    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		posted: metric.Counters("relay_outbound_posted_total",
			"Posts made (or found already made after a crash), by destination.", "destination"),
		failed: metric.Counters("relay_outbound_failed_total",
			"Failed post attempts, by destination and class (rate_limited, transient, permanent).", "destination", "class"),
		duplicates: metric.Counters("relay_outbound_duplicates_total",
			"Messages acknowledged without posting because their idempotency key was already done.", "destination"),
		duration: metric.Histograms("relay_outbound_post_seconds",
			"Time spent calling the destination's API per attempt, by destination.", prometheus.ExponentialBuckets(0.005, 2.5, 10), "destination"),
		notices: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_outbound_failure_notices_total",
			Help: "Failure notices posted in Slack approval threads.",
		}),
	}
	for _, c := range []prometheus.Collector{m.posted, m.failed, m.duplicates, m.duration, m.notices} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return m, nil
}
