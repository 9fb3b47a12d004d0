package metric_test

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/internal/metric"
)

// TestVectors: each helper's vector carries its name, help, type, labels
// and buckets into what the registry gathers.
func TestVectors(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	c := metric.Counters("t_total", "Things.", "kind")
	g := metric.Gauges("t_up", "Up or not.", "server")
	h := metric.Histograms("t_seconds", "Time.", []float64{.5, 1}, "op")
	reg.MustRegister(c, g, h)
	c.WithLabelValues("a").Add(2)
	g.WithLabelValues("s").Set(1)
	h.WithLabelValues("x").Observe(.7)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ help, typ, label string }
	got := map[string]seen{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		got[mf.GetName()] = seen{mf.GetHelp(), mf.GetType().String(), m.GetLabel()[0].GetName() + "=" + m.GetLabel()[0].GetValue()}
		if hist := m.GetHistogram(); hist != nil {
			var bounds []float64
			for _, b := range hist.GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			if !slices.Equal(bounds, []float64{.5, 1}) || hist.GetSampleCount() != 1 {
				t.Errorf("histogram buckets %v, count %d; want [0.5 1], 1", bounds, hist.GetSampleCount())
			}
		}
	}
	want := map[string]seen{
		"t_total":   {"Things.", "COUNTER", "kind=a"},
		"t_up":      {"Up or not.", "GAUGE", "server=s"},
		"t_seconds": {"Time.", "HISTOGRAM", "op=x"},
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %+v, want %+v", name, got[name], w)
		}
	}
}
