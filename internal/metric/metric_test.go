package metric_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/internal/metric"
)

// Each vector carries its name, help, type, labels and buckets into what
// the registry gathers.
func Example() {
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
		fmt.Println(err)
		return
	}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		fmt.Println(mf.GetName(), mf.GetType(), mf.GetHelp(), m.GetLabel()[0].GetName()+"="+m.GetLabel()[0].GetValue())
		for _, b := range m.GetHistogram().GetBucket() {
			fmt.Println("  le", b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	// Output:
	// t_seconds HISTOGRAM Time. op=x
	//   le 0.5 0
	//   le 1 1
	// t_total COUNTER Things. kind=a
	// t_up GAUGE Up or not. server=s
}
