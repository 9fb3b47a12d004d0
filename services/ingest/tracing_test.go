package ingest_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/services/ingest"
)

// discard is a span exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkIngestTracing is the webhook path (signed request over loopback
// HTTP, verify, map, publish to an embedded JetStream, 200) with tracing off
// (what a relay without OTEL_EXPORTER_OTLP_* runs: no bus trace hooks, the
// no-op tracer) and on (the bus's trace hooks, an SDK provider batching to
// an exporter that drops the spans), in one run:
//
//	go test ./services/ingest -run '^$' -bench IngestTracing -benchtime 3000x -count 3
func BenchmarkIngestTracing(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			var opts []bustest.Option
			if mode == "on" {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
				restore := telemetry.Use(tp)
				b.Cleanup(func() { restore(); _ = tp.Shutdown(context.Background()) })
				opts = append(opts, func(c *bus.Config) { c.Trace = telemetry.BusHooks() })
			}
			addr := serveGateway(b, ingest.Config{Limits: map[string]ingest.Limits{"github": {Deadline: time.Minute}}}, opts...)
			validLatencies(b, addr, 50) // warm up
			b.ReportAllocs()
			b.ResetTimer()
			lat := validLatencies(b, addr, b.N)
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
		})
	}
}
