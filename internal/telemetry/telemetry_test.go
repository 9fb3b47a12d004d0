package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/config/configtest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/internal/testenv"
)

// record turns tracing on with a span recorder until the test ends.
func record(t *testing.T) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	restore := telemetry.Use(tp)
	t.Cleanup(func() { restore(); _ = tp.Shutdown(context.Background()) })
	return rec
}

// TestOffCostsNothing: with tracing off the hooks add no header, open no
// span and allocate nothing.
func TestOffCostsNothing(t *testing.T) {
	h := nats.Header{}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if done := telemetry.Publish(ctx, "relay.in.x", h); done != nil {
			t.Fatal("publish hook returned a span while off")
		}
		if _, done := telemetry.Consume(ctx, "relay.in.x", "agent", h, 1); done != nil {
			t.Fatal("consume hook returned a span while off")
		}
		if _, span := telemetry.Start(ctx, "x", trace.SpanKindInternal); span != nil {
			t.Fatal("Start returned a span while off")
		}
	})
	if allocs != 0 || len(h) != 0 {
		t.Errorf("off: got %v allocations and headers %v, want none", allocs, h)
	}
}

// TestPropagatesOverTheBus: a publish under a span writes traceparent; the
// consumer's handler runs in a span of the same trace, a child of the
// producer span.
func TestPropagatesOverTheBus(t *testing.T) {
	rec := record(t)
	b := bustest.Embedded(t, func(c *bus.Config) { c.Trace = telemetry.BusHooks() })
	got := make(chan trace.SpanContext, 1)
	header := make(chan nats.Header, 1)
	testenv.Go(t, "consumer", func(ctx context.Context) error {
		return b.Consume(ctx, bus.ConsumerConfig{Name: "c", Subject: "in.>"}, bus.HandlerFunc(func(ctx context.Context, m *bus.Message) error {
			got <- trace.SpanContextFromContext(ctx)
			header <- m.Header
			return nil
		}))
	})
	ctx, root := telemetry.Start(t.Context(), "root", trace.SpanKindServer)
	if _, err := b.Publish(ctx, "in.github.issues", envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "hi")); err != nil {
		t.Fatal(err)
	}
	root.End()
	var sc trace.SpanContext
	select {
	case sc = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	if sc.TraceID() != root.SpanContext().TraceID() {
		t.Errorf("consumer trace %s, want the publisher's %s", sc.TraceID(), root.SpanContext().TraceID())
	}
	if tp := (<-header).Get("traceparent"); !strings.Contains(tp, root.SpanContext().TraceID().String()) {
		t.Errorf("got traceparent header %q", tp)
	}
	testenv.WaitFor(t, 5*time.Second, "the consumer span to end", func() bool { return len(rec.Ended()) >= 3 })
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	send, process := byName["send "+b.Subject("in.github.issues")], byName["process "+b.Subject("in.github.issues")]
	if send == nil || process == nil || process.Parent().SpanID() != send.SpanContext().SpanID() ||
		send.SpanKind() != trace.SpanKindProducer || process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("got spans %v, want a producer span and its consumer child", byName)
	}
}

func TestLogHandlerAddsTraceID(t *testing.T) {
	record(t)
	var buf bytes.Buffer
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("service", "x")
	ctx, span := telemetry.Start(context.Background(), "op", trace.SpanKindInternal)
	log.InfoContext(ctx, "with span")
	span.End()
	log.Info("without")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"trace_id":"`+span.SpanContext().TraceID().String()+`"`) ||
		strings.Contains(lines[1], "trace_id") {
		t.Errorf("got log:\n%s", buf.String())
	}
}

// TestTransport: an outbound call is a client span whose context the
// server receives in traceparent; errors mark the span.
func TestTransport(t *testing.T) {
	rec := record(t)
	var seen string
	rt := telemetry.Transport(roundTrip(func(r *http.Request) (*http.Response, error) {
		seen = r.Header.Get("traceparent")
		if r.URL.Path == "/fail" {
			return nil, errors.New("refused")
		}
		return &http.Response{StatusCode: 201, Body: http.NoBody, Request: r}, nil
	}))
	for _, path := range []string{"/ok", "/fail"} {
		req, _ := http.NewRequest(http.MethodPost, "https://api.example.com"+path+"?token=secret", nil)
		resp, err := rt.RoundTrip(req)
		if resp != nil {
			resp.Body.Close()
		}
		if (err != nil) != (path == "/fail") || seen == "" {
			t.Errorf("%s: got err %v, traceparent %q", path, err, seen)
		}
	}
	spans := rec.Ended()
	if len(spans) != 2 || spans[0].SpanKind() != trace.SpanKindClient || spans[1].Status().Code.String() != "Error" {
		t.Fatalf("got %d spans: %v", len(spans), spans)
	}
	for _, a := range spans[0].Attributes() {
		if strings.Contains(a.Value.Emit(), "secret") {
			t.Errorf("attribute %s carries the query: %s", a.Key, a.Value.Emit())
		}
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestReadSettings(t *testing.T) {
	t.Parallel()
	read := func(env *config.Env) telemetry.Settings {
		s := telemetry.ReadSettings(env)
		env.Unknown("RELAY_") // the OTEL_* variables are not the relay's own: never unknown
		return s
	}
	// exports reports whether s exports to endpoint ("" for off) as the relay.
	exports := func(endpoint string) func(telemetry.Settings) bool {
		return func(s telemetry.Settings) bool { return s.Endpoint == endpoint && s.Service == "relay" }
	}
	configtest.Run(t, read, []configtest.Case[telemetry.Settings]{
		{Name: "unset: off", Check: exports("")},
		{Name: "endpoint", Env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}, Check: exports("http://collector:4318/v1/traces")},
		{Name: "traces endpoint wins", Env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/traces"}, Check: exports("https://b/traces")},
		{Name: "sdk disabled", Env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_SDK_DISABLED": "true"}, Check: exports("")},
		{Name: "grpc refused", Env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, WantErr: []string{"OTEL_EXPORTER_OTLP_PROTOCOL"}},
		{Name: "bad url", Env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, WantErr: []string{"OTEL_EXPORTER_OTLP_ENDPOINT"}},
	})
}

// TestHTTPClientKeepsConnections: rounds of calls in flight together to one
// host reuse the connections of the round before instead of dialling most of
// them again (net/http's default transport keeps 2 idle per host, which here
// would mean 16 + 9 x 14 = 142 connections).
func TestHTTPClientKeepsConnections(t *testing.T) {
	const inFlight, rounds = 16, 10
	var mu sync.Mutex
	dialled := 0
	arrived := make(chan struct{}, inFlight)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			dialled++
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	c := telemetry.HTTPClient(10 * time.Second)
	for range rounds {
		var wg sync.WaitGroup
		for range inFlight {
			wg.Go(func() {
				resp, err := c.Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
		// Every call of the round holds its own connection before any ends.
		for range inFlight {
			<-arrived
		}
		for range inFlight {
			release <- struct{}{}
		}
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	if dialled < inFlight || dialled > 3*inFlight {
		t.Fatalf("%d rounds of %d calls in flight dialled %d connections, want %d to %d", rounds, inFlight, dialled, inFlight, 3*inFlight)
	}
}
