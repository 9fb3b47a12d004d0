// Package metric declares the relay's Prometheus collector vectors: a
// name, its help text and its labels, without the options structs spelled
// out at every collector.
package metric

import "github.com/prometheus/client_golang/prometheus"

// Counters is the counter vector name, described by help, over labels.
func Counters(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Gauges is the gauge vector name, described by help, over labels.
func Gauges(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// Histograms is the histogram vector name, described by help, with the
// bucket upper bounds buckets (nil: Prometheus's defaults), over labels.
func Histograms(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}
