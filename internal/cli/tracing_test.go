package cli

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/relaystation/relay/internal/story"
	"github.com/relaystation/relay/internal/testenv"
)

// otlpReceiver is an OTLP/HTTP traces endpoint (protobuf) that keeps what
// it receives.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var msg coltrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &msg)
		}
		if req.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("OTLP receiver: %s %s: %v", req.Method, req.URL.Path, err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// trace returns the spans of one trace.
func (r *otlpReceiver) trace(id string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if hex.EncodeToString(s.TraceId) == id {
			out = append(out, s)
		}
	}
	return out
}

// TestTracing: with OTEL_EXPORTER_OTLP_ENDPOINT set, one trace runs from the
// webhook through the agent, the tool, the approval and the outbound post:
// every hop of the story carries its id, and the exported spans include
// the HTTP server, verify, publish, consume, model call, tool call and
// outbound HTTP client spans. Not parallel: tracing is process-wide.
func TestTracing(t *testing.T) {
	testenv.SkipShort(t, "end-to-end")
	rcv := newOTLPReceiver(t)
	s := startStack(t, func(env map[string]string) {
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = rcv.srv.URL
		env["OTEL_SERVICE_NAME"] = "relay-test"
		env["RELAY_LOG_LEVEL"] = "info"
	})
	delivery := uuid.NewString()
	s.click(e2eApprover, s.approvalPost(s.issueOpenedAs(3001, "approve", delivery)), "approve")
	s.exactlyOneComment(3001)
	var st story.Story
	want := []string{"webhook", "model_call", "tool_call", "tool_result", "model_call", "suggestion", "approval", "outbound", "outbound"}
	testenv.WaitFor(t, 10*time.Second, "the post record in the story", func() bool {
		code, out, _ := s.trace(delivery, "-json")
		st = story.Story{}
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && inOrder(storyKinds(&st), want)
	})
	id := st.Hops[0].TraceID
	if len(id) != 32 {
		t.Fatalf("the webhook hop has trace id %q", id)
	}
	for _, h := range st.Hops {
		if h.Kind != story.KindApproval && h.Kind != story.KindAudit && h.TraceID != id {
			t.Errorf("hop %s %s: trace id %q, want the webhook's %s", h.Kind, h.Subject, h.TraceID, id)
		}
	}
	s.stop() // flushes the spans
	checkSpans(t, rcv.trace(id))
	if !slices.ContainsFunc(strings.Split(s.logs.String(), "\n"), func(l string) bool {
		return strings.Contains(l, `"msg":"posted"`) && strings.Contains(l, `"trace_id":"`+id+`"`)
	}) {
		t.Errorf("no log line of the post carries trace_id %s", id)
	}
}

// checkSpans checks that one trace holds each kind of span the relay opens.
func checkSpans(t *testing.T, spans []*tracepb.Span) {
	t.Helper()
	type want struct {
		name string
		kind tracepb.Span_SpanKind
		attr string
	}
	for _, w := range []want{
		{"POST /webhooks/github", tracepb.Span_SPAN_KIND_SERVER, "http.response.status_code"},
		{"verify github", tracepb.Span_SPAN_KIND_INTERNAL, ""},
		{"send relay.in.github.issues", tracepb.Span_SPAN_KIND_PRODUCER, "messaging.destination.name"},
		{"process relay.in.github.issues", tracepb.Span_SPAN_KIND_CONSUMER, "messaging.consumer.group.name"},
		{"chat scripted", tracepb.Span_SPAN_KIND_CLIENT, "gen_ai.usage.input_tokens"},
		{"tools/call echo", tracepb.Span_SPAN_KIND_CLIENT, "gen_ai.tool.name"},
		{"send relay.tool.result", tracepb.Span_SPAN_KIND_PRODUCER, "messaging.system"},
		{"process relay.out.github", tracepb.Span_SPAN_KIND_CONSUMER, "messaging.system"},
		{"POST", tracepb.Span_SPAN_KIND_CLIENT, "http.response.status_code"},
	} {
		i := slices.IndexFunc(spans, func(s *tracepb.Span) bool {
			return s.Name == w.name && s.Kind == w.kind &&
				(w.attr == "" || slices.ContainsFunc(s.Attributes, func(a *common.KeyValue) bool { return a.Key == w.attr }))
		})
		if i < 0 {
			t.Errorf("no %s span %q with %s in the trace", w.kind, w.name, w.attr)
		}
	}
	if t.Failed() {
		for _, s := range spans {
			t.Logf("span %s %q", s.Kind, s.Name)
		}
	}
}
