package telemetry

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"

	"github.com/relaystation/relay/config"
)

// Settings are the standard OpenTelemetry variables the relay reads. They
// are not RELAY_* settings; the OTLP exporter also reads the other
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates) itself,
// and the SDK OTEL_TRACES_SAMPLER and OTEL_RESOURCE_ATTRIBUTES.
type Settings struct {
	// Endpoint is the OTLP/HTTP traces URL: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
	// or OTEL_EXPORTER_OTLP_ENDPOINT + "/v1/traces". Empty: tracing off.
	Endpoint string
	// Service is OTEL_SERVICE_NAME, default "relay".
	Service string
}

// ReadSettings reads the OTEL_* variables. OTEL_SDK_DISABLED=true turns
// tracing off whatever the endpoint; OTEL_EXPORTER_OTLP_PROTOCOL (or
// _TRACES_PROTOCOL), when set, must be http/protobuf, the one exporter the
// relay ships.
func ReadSettings(env *config.Env) Settings {
	s := Settings{Service: env.String("OTEL_SERVICE_NAME", "relay")}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := env.String(name, ""); p != "" && p != "http/protobuf" {
			env.Failf(name, "%q is not supported: the relay exports traces over OTLP/HTTP (http/protobuf)", p)
		}
	}
	if env.Bool("OTEL_SDK_DISABLED", false) {
		return s
	}
	if u := env.URL("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http", "https"); u != "" {
		s.Endpoint = u
	} else if u := env.URL("OTEL_EXPORTER_OTLP_ENDPOINT", "http", "https"); u != "" {
		s.Endpoint = strings.TrimSuffix(u, "/") + "/v1/traces"
	}
	return s
}

// Setup turns tracing on when s names an endpoint: an SDK tracer provider
// with a batching OTLP/HTTP exporter, installed with Use. The returned
// function flushes and stops it (a no-op when tracing is off); call it on
// the way out.
func Setup(ctx context.Context, s Settings) (shutdown func(context.Context) error, err error) {
	if s.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(s.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter for %s: %w", s.Endpoint, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(s.Service)))
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	restore := Use(tp)
	return func(ctx context.Context) error {
		restore()
		return tp.Shutdown(ctx)
	}, nil
}
