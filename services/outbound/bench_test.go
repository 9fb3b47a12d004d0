package outbound

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
)

// BenchmarkDeliverGitHub measures one approved answer from publish on
// out.github to the comment created at a local GitHub API and the key
// recorded done: the worker's own overhead (claim, marker check, comment,
// record, ack) across the bus. Reports p50/p99 latency per answer.
func BenchmarkDeliverGitHub(b *testing.B) {
	h := start(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		tgt := &envelope.Target{Channel: "github", Owner: "octo", Repo: "hello", Number: 1 + i%50}
		e := answer(tgt, fmt.Sprintf("Answer %d", i))
		st := time.Now()
		if _, err := h.bus.Publish(ctx, "out.github", e); err != nil {
			b.Fatal(err)
		}
		key := "out:" + e.ID
		for {
			r, err := h.svc.Lookup(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if r != nil && r.State == stateDone {
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
		lat = append(lat, time.Since(st))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}
