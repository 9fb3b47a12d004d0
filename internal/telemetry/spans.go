package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Attributes of the messaging semantic conventions, with NATS as the system.
var natsSystem = attribute.String("messaging.system", "nats")

// Publish opens the producer span of a publish to subject and writes its
// trace context into the message header h. Off, it returns nil. The caller
// calls the returned function with the publish's result.
func Publish(ctx context.Context, subject string, h map[string][]string) func(error) {
	if !Enabled() {
		return nil
	}
	ctx, span := Tracer().Start(ctx, "send "+subject, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(natsSystem, attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.operation.type", "send"), attribute.String("messaging.operation.name", "publish")))
	prop.Inject(ctx, natsCarrier(h))
	return func(err error) { End(span, err) }
}

// Consume opens the consumer span of one delivery, a child of the trace
// context in its header h. Off, it returns ctx and nil.
func Consume(ctx context.Context, subject, consumer string, h map[string][]string, delivered uint64) (context.Context, func(error)) {
	if !Enabled() {
		return ctx, nil
	}
	ctx = Extract(ctx, h)
	ctx, span := Tracer().Start(ctx, "process "+subject, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(natsSystem, attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.operation.type", "process"), attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.consumer.group.name", consumer),
			attribute.Int64("messaging.nats.delivered", int64(delivered))))
	return ctx, func(err error) { End(span, err) }
}

// ServerSpan opens the HTTP server span of a webhook request to route (the
// http semantic conventions), continuing a trace the caller sent. Off, it
// returns r's context and nil; the caller ends it with EndServer.
func ServerSpan(r *http.Request, route string) (context.Context, trace.Span) {
	if !Enabled() {
		return r.Context(), nil
	}
	ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return Tracer().Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route),
			attribute.String("url.path", r.URL.Path), attribute.String("url.scheme", scheme(r)),
			attribute.String("server.address", r.Host), attribute.String("user_agent.original", r.UserAgent()),
			attribute.Int64("http.request.body.size", r.ContentLength)))
}

// EndServer ends an HTTP server span with the response status (5xx is an
// error, as the conventions say for servers).
func EndServer(span trace.Span, status int) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(status))
	}
	span.End()
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// IdleConnsPerHost is how many idle connections the relay's API clients keep
// to one host. net/http's default keeps 2, so a worker with 8 calls in flight
// to Slack closed 6 connections after each burst and dialled (and over TLS
// handshook) them again for the next.
const IdleConnsPerHost = 64

// pooled is the transport the relay's API clients share: net/http's default
// transport with room to keep a connection per concurrent call to a host.
var pooled = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4 * IdleConnsPerHost
	t.MaxIdleConnsPerHost = IdleConnsPerHost
	return t
}()

// Transport wraps rt with HTTP client spans and trace context propagation,
// for the outbound API clients. Off, a request goes straight to rt. A nil rt
// is the shared transport of the relay's API clients (see IdleConnsPerHost).
func Transport(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = pooled
	}
	return transport{rt}
}

// HTTPClient is an http.Client with timeout (0: none) whose requests are
// traced and share the API clients' connections.
func HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: Transport(nil)}
}

type transport struct{ next http.RoundTripper }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !Enabled() {
		return t.next.RoundTrip(req)
	}
	ctx, span := Tracer().Start(req.Context(), req.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", req.Method),
			attribute.String("server.address", req.URL.Hostname()), attribute.String("url.full", redactedURL(req)),
			attribute.String("url.scheme", req.URL.Scheme)))
	req = req.Clone(ctx)
	prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		End(span, err)
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
	}
	span.End()
	return resp, nil
}

// redactedURL is the request URL without credentials or query (tokens).
func redactedURL(req *http.Request) string {
	u := *req.URL
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// ModelCall opens the span of a chat model call (GenAI conventions); the
// caller ends it with EndModelCall. Off, it returns ctx and nil.
func ModelCall(ctx context.Context, model string) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, nil
	}
	return Tracer().Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "openai"),
			attribute.String("gen_ai.request.model", model)))
}

// EndModelCall ends a model call span with the usage the endpoint reported.
func EndModelCall(span trace.Span, responseModel string, input, output int, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", input), attribute.Int("gen_ai.usage.output_tokens", output))
	if responseModel != "" {
		span.SetAttributes(attribute.String("gen_ai.response.model", responseModel))
	}
	End(span, err)
}

// ToolCall opens the span of an MCP tools/call (the MCP and GenAI
// conventions: execute_tool); the caller ends it with End. Off, it returns
// ctx and nil.
func ToolCall(ctx context.Context, server, tool string) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, nil
	}
	return Tracer().Start(ctx, "tools/call "+tool, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", tool), attribute.String("rpc.system", "mcp"), attribute.String("rpc.service", server)))
}

// EndSpan ends span (nil: tracing was off) with err.
func EndSpan(span trace.Span, err error) {
	if span != nil {
		End(span, err)
	}
}
