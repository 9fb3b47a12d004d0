// Package telemetry is the relay's OpenTelemetry tracing: setup from the
// standard OTEL_* variables, W3C trace context in NATS message headers, and
// the spans the services open (HTTP receive, publish, consume, model and tool
// calls, outbound HTTP calls).
//
// Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and OTEL_SDK_DISABLED is not
// true). Off, Enabled is false and every helper returns at once: no span, no
// header, no allocation on the hot paths, which check Enabled first.
package telemetry

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of the relay's spans.
const ScopeName = "github.com/relaystation/relay"

var (
	enabled atomic.Bool
	tracer  atomic.Pointer[trace.Tracer]
	prop    = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
)

func init() {
	t := trace.Tracer(noop.NewTracerProvider().Tracer(ScopeName))
	tracer.Store(&t)
}

// Enabled reports whether spans are recorded and exported. The hot paths
// check it before doing anything for tracing.
func Enabled() bool { return enabled.Load() }

// Use makes tp the relay's tracer provider (and the OpenTelemetry global
// one, with the W3C propagators) and turns tracing on; the returned
// function turns it off again. Setup calls it; tests call it with an SDK
// provider and a span recorder.
func Use(tp trace.TracerProvider) (restore func()) {
	t := tp.Tracer(ScopeName)
	tracer.Store(&t)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(prop)
	enabled.Store(true)
	return func() {
		enabled.Store(false)
		n := trace.Tracer(noop.NewTracerProvider().Tracer(ScopeName))
		tracer.Store(&n)
	}
}

// Tracer is the relay's tracer (a no-op one while tracing is off).
func Tracer() trace.Tracer { return *tracer.Load() }

// Start starts a span when tracing is on; off, it returns ctx and nil
// (end it with EndSpan).
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, nil
	}
	return Tracer().Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// End ends span, recording err (if any) as its error status.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, firstLine(err.Error()))
	}
	span.End()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// Inject writes ctx's trace context into NATS message headers under the
// W3C names as they are (traceparent, tracestate; NATS header keys are
// case-sensitive); it does nothing when ctx carries no span.
func Inject(ctx context.Context, h map[string][]string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	prop.Inject(ctx, natsCarrier(h))
}

// Extract returns ctx with the remote trace context of NATS headers.
func Extract(ctx context.Context, h map[string][]string) context.Context {
	return prop.Extract(ctx, natsCarrier(h))
}

// natsCarrier is a header map read and written with exact keys.
type natsCarrier map[string][]string

func (c natsCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c natsCarrier) Set(key, value string) { c[key] = []string{value} }

func (c natsCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// TraceID is the trace id of ctx's span, or "".
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// LogHandler wraps h so records logged with a context that carries a span
// get a trace_id attribute.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := TraceID(ctx); id != "" {
		r.AddAttrs(slog.String("trace_id", id))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}

func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }

// Resume opens a span named name in the trace of traceparent (a W3C header
// value stored earlier), linked to ctx's own span: a human's click that
// releases an answer drafted in another trace continues that trace. Off,
// or without traceparent, it returns ctx and nil.
func Resume(ctx context.Context, name, traceparent string) (context.Context, trace.Span) {
	if !Enabled() || traceparent == "" {
		return ctx, nil
	}
	link := trace.LinkFromContext(ctx)
	parent := Extract(ctx, map[string][]string{"traceparent": {traceparent}})
	return Tracer().Start(parent, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithLinks(link))
}
