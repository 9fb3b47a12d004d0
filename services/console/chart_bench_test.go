package console

import (
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
)

// BenchmarkLatencyView measures the latency chart's reads: "first" is the
// first view after a restart (every webhook and suggestion of the hour read
// back), "refresh" an open overview's refresh with nothing new stored.
//
//	go test ./services/console -run '^$' -bench LatencyView -benchtime 20x
func BenchmarkLatencyView(b *testing.B) {
	bb := bustest.Embedded(b)
	const tasks = 10_000
	for range tasks {
		w := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "issue opened")
		if _, err := bb.Publish(b.Context(), "in.github.issues", w); err != nil {
			b.Fatal(err)
		}
		s := envelope.New(envelope.ChannelGitHub, envelope.RoleAssistant, "suggestion")
		s.Meta.TaskID = envelope.TaskOf(w.ID)
		if _, err := bb.Publish(b.Context(), "agent.suggestion", s); err != nil {
			b.Fatal(err)
		}
	}
	check := func(v latencyView) {
		if v.Hour[0].N != tasks {
			b.Fatalf("%d stages measured, want %d", v.Hour[0].N, tasks)
		}
	}
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			var l latencies
			v, err := l.view(b.Context(), bb, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			check(v)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(2*tasks), "ns/message")
	})
	b.Run("refresh", func(b *testing.B) {
		var l latencies
		if _, err := l.view(b.Context(), bb, time.Now()); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			v, err := l.view(b.Context(), bb, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			check(v)
		}
	})
}
