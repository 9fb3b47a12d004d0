package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/remote"
	"github.com/relaystation/relay/memory/session"
	"github.com/relaystation/relay/tools"
)

// ---- a scripted OpenAI-compatible chat endpoint ----

// reply answers one chat request.
type reply func(w http.ResponseWriter, r *fakes.ChatRequest)

// llmServer answers requests with the script in order; the last entry
// repeats. It records every request and when it came.
type llmServer struct {
	URL    string
	mu     sync.Mutex
	script []reply
	reqs   []*fakes.ChatRequest
	times  []time.Time
}

func newLLM(t testing.TB, script ...reply) *llmServer {
	t.Helper()
	l := &llmServer{script: script}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req fakes.ChatRequest
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		i := len(l.reqs)
		l.reqs = append(l.reqs, &req)
		l.times = append(l.times, time.Now())
		f := l.script[min(i, len(l.script)-1)]
		l.mu.Unlock()
		f(w, &req)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	l.URL = srv.URL + "/v1"
	return l
}

func (l *llmServer) requests() []*fakes.ChatRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*fakes.ChatRequest(nil), l.reqs...)
}

func (l *llmServer) count() int { return len(l.requests()) }

func (l *llmServer) model(t testing.TB) Model {
	t.Helper()
	m, err := NewOpenAI(OpenAIConfig{BaseURL: l.URL, Model: "test-model", Timeout: 5 * time.Second,
		MaxTries: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func completion(msg map[string]any) map[string]any {
	return map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "test-model",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": msg}},
		"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// callTool replies with a native tool call.
func callTool(name string, args map[string]any) reply {
	return func(w http.ResponseWriter, r *fakes.ChatRequest) {
		a, _ := json.Marshal(args)
		writeJSON(w, completion(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
			map[string]any{"id": fmt.Sprintf("call_%d", len(r.Messages)), "type": "function",
				"function": map[string]any{"name": name, "arguments": string(a)}},
		}}))
	}
}

// say replies with a final message.
func say(text string) reply {
	return func(w http.ResponseWriter, _ *fakes.ChatRequest) {
		writeJSON(w, completion(map[string]any{"role": "assistant", "content": text}))
	}
}

// status replies with an HTTP error status and headers.
func status(code int, headers ...string) reply {
	return func(w http.ResponseWriter, _ *fakes.ChatRequest) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, `{"error":{"message":"status %d","type":"server_error","code":null,"param":null}}`, code)
	}
}

// ---- a fake tool runner answering tool.call and rpc.tool.list ----

type fakeRunner struct {
	mu    sync.Mutex
	calls []*envelope.Envelope
	// tools, when set, is the list role "agent" gets (else echoTool).
	tools []tools.ToolInfo
	fail  bool
	hold  chan struct{} // when set, answers wait until it is closed
	// sampling is reported as the result's sampling_tokens when set.
	sampling int
	// stored, when set, is the text of every result, published as the tool
	// runner publishes one too large for the bus: stored whole in
	// tools.ResultBucket, its first storedHead bytes on the bus.
	stored string
}

// storedHead is how much of a stored result the fake runner publishes.
const storedHead = 100

var echoTool = tools.ToolInfo{Name: "everything.echo", Server: "everything", Tool: "echo",
	Description: "Echoes back the input", InputSchema: map[string]any{"type": "object",
		"properties": map[string]any{"message": map[string]any{"type": "string"}}, "required": []any{"message"}}}

// startRunner answers tool list requests for role "agent" and runs
// everything.echo for every tool.call.
func startRunner(t testing.TB, b *bus.Bus, fr *fakeRunner) *fakeRunner {
	t.Helper()
	if fr == nil {
		fr = &fakeRunner{}
	}
	sub, err := b.Conn().Subscribe(b.Prefix()+"."+tools.SubjectList, func(m *nats.Msg) {
		var req tools.ListRequest
		_ = json.Unmarshal(m.Data, &req)
		resp := tools.ListResponse{Tools: []tools.ToolInfo{}}
		if req.Role == "agent" {
			resp.Tools = []tools.ToolInfo{echoTool}
			fr.mu.Lock()
			if fr.tools != nil {
				resp.Tools = fr.tools
			}
			fr.mu.Unlock()
		}
		data, _ := json.Marshal(resp)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Consume(ctx, bus.ConsumerConfig{Name: "fake-runner", Subject: envelope.SubjectToolCall, ShutdownGrace: time.Second,
			Concurrency: 4, NakDelays: []time.Duration{20 * time.Millisecond}},
			bus.HandlerFunc(func(hctx context.Context, m *bus.Message) error {
				call := m.Envelope
				fr.mu.Lock()
				fr.calls = append(fr.calls, call)
				hold, fail, sampling, stored := fr.hold, fr.fail, fr.sampling, fr.stored
				fr.mu.Unlock()
				if hold != nil {
					select {
					case <-hold:
					case <-hctx.Done():
						return hctx.Err()
					}
				}
				out, err := call.Reply(call.Channel, envelope.RoleTool, ""), error(nil)
				msg, _ := call.ToolCall.Args["message"].(string)
				subject := envelope.SubjectToolResult
				res := map[string]any{"status": "success", "text": "Echo: " + msg}
				if fail {
					subject = envelope.SubjectToolFailed
					res = map[string]any{"status": "error", "error": "server everything is offline"}
				}
				if sampling > 0 {
					res["sampling_tokens"] = sampling
				}
				out.Content = fmt.Sprint(res["text"], res["error"])
				out.ToolCall = &envelope.ToolCall{ID: call.ToolCall.ID, Name: call.ToolCall.Name, Args: call.ToolCall.Args, Result: res}
				out.Meta.Set("in_reply_to", call.ID)
				if stored != "" {
					if out, err = storeResult(hctx, b, out, stored); err != nil {
						return err
					}
				}
				_, err = b.Publish(hctx, subject, out, bus.WithMsgID("tool-result-"+call.ID))
				return err
			}))
	}()
	t.Cleanup(func() { cancel(); <-done })
	return fr
}

// storeResult stores out with text as its result in tools.ResultBucket and
// returns the envelope the tool runner publishes then: the start of the
// text and the object's name.
func storeResult(ctx context.Context, b *bus.Bus, out *envelope.Envelope, text string) (*envelope.Envelope, error) {
	whole := *out
	tc := *out.ToolCall
	tc.Result = map[string]any{"status": "success", "text": text}
	whole.ToolCall, whole.Content = &tc, text
	raw, err := whole.Marshal()
	if err != nil {
		return nil, err
	}
	os, err := b.JetStream().CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: tools.ResultBucket(b.Prefix())})
	if err != nil {
		return nil, err
	}
	name := "tool-result-" + out.ID
	if _, err := os.PutBytes(ctx, name, raw); err != nil {
		return nil, err
	}
	cut := *out
	ctc := *out.ToolCall
	ctc.Result = map[string]any{"status": "success", "text": text[:storedHead], "cut": true}
	cut.ToolCall, cut.Content = &ctc, text[:storedHead]
	cut.Meta.Set(tools.MetaResultObject, map[string]any{"bucket": tools.ResultBucket(b.Prefix()), "name": name, "bytes": len(raw)})
	return &cut, nil
}

func (fr *fakeRunner) received() []*envelope.Envelope {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return append([]*envelope.Envelope(nil), fr.calls...)
}

// ---- a fake memory worker served over the real bus (memory/remote) ----

type fakeMemory struct {
	refs []memory.Ref // long-term memories for Retrieve
	docs []memory.Ref // documents for RetrieveDocs
}

func (f *fakeMemory) Context(_ context.Context, thread string, _ int) (memory.SessionContext, error) {
	sc := memory.SessionContext{Thread: thread, Summary: "The reporter asked about README typos before.",
		Turns: []session.Turn{{ID: "t1", Role: "user", Content: "earlier question about the README"}}}
	sc.Tokens = memory.Tokens(sc.Text())
	return sc, nil
}

func (f *fakeMemory) Retrieve(context.Context, memory.Query) ([]memory.Ref, error) {
	return f.refs, nil
}

func (f *fakeMemory) RetrieveDocs(context.Context, string, int) ([]memory.Ref, error) {
	return f.docs, nil
}

func (f *fakeMemory) Remember(context.Context, memory.Note) (longterm.Memory, error) {
	return longterm.Memory{}, nil
}

func (f *fakeMemory) Forget(_ context.Context, thread string) (memory.Forgotten, error) {
	return memory.Forgotten{Thread: thread}, nil
}

func serveMemory(t testing.TB, b *bus.Bus, f *fakeMemory) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = remote.Serve(ctx, b.Conn(), f, remote.ServerConfig{Prefix: b.Prefix()})
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// ---- the agent ----

type harness struct {
	b *bus.Bus
	// toolsTTL is how long the agent caches tool lists (0: not at all);
	// tools is the agent's lister.
	toolsTTL time.Duration
	tools    *CachedTools
	llm      *llmServer
	runner   *fakeRunner
	mem      *fakeMemory
	out      <-chan *envelope.Envelope
	cfg      Config
	stops    []func()
	noFake   bool
}

type setupOption func(*harness)

func withConfig(f func(*Config)) setupOption { return func(h *harness) { f(&h.cfg) } }
func withRunner(fr *fakeRunner) setupOption  { return func(h *harness) { h.runner = fr } }

// withToolsTTL makes the agent cache its tool lists for ttl.
func withToolsTTL(ttl time.Duration) setupOption { return func(h *harness) { h.toolsTTL = ttl } }

// withBus runs on b, with no fake tool runner (the test starts a real one).
func withBus(b *bus.Bus) setupOption { return func(h *harness) { h.b, h.noFake = b, true } }

// setup starts a bus, the fakes, an output observer on agent.> and one agent.
func setup(t testing.TB, script []reply, opts ...setupOption) *harness {
	t.Helper()
	h := &harness{}
	h.llm = newLLM(t, script...)
	h.mem = &fakeMemory{
		refs: []memory.Ref{{ID: "mem-readme", Text: "The README was fixed in PR #7.", URI: "https://example.com/pr/7"}},
		docs: []memory.Ref{{ID: "doc-style", Text: "Spelling follows the style guide.", URI: "https://docs.example.com/style"}},
	}
	h.cfg = Config{
		Mention:     "@relay-bot",
		AgentID:     "agent-test",
		NakDelays:   []time.Duration{20 * time.Millisecond},
		Concurrency: 4,
		Logger:      testenv.Logger(t, slog.LevelWarn),
		Registerer:  prometheus.NewRegistry(),
	}
	for _, o := range opts {
		o(h)
	}
	if h.b == nil {
		h.b = bustest.Embedded(t)
	}
	if !h.noFake {
		h.runner = startRunner(t, h.b, h.runner)
	}
	serveMemory(t, h.b, h.mem)
	h.out = bustest.Observe(t, h.b, "test-out", "agent.>")
	h.start(t)
	return h
}

// start runs an agent on h's bus until the returned stop is called (or the
// test ends) and waits until its inbound consumer exists.
func (h *harness) start(t testing.TB) (stop func()) {
	t.Helper()
	cfg := h.cfg
	cfg.Model = h.llm.model(t)
	cfg.Memory = BusMemory(h.b.Conn(), h.b.Prefix(), 5*time.Second)
	h.tools = BusTools(h.b.Conn(), h.b.Prefix(), h.toolsTTL).SetWait(0) // the fake runner has no servers to wait for
	cfg.Tools = h.tools
	cfg.Registerer = prometheus.NewRegistry()
	svc, err := New(t.Context(), cfg, h.b)
	if err != nil {
		t.Fatal(err)
	}
	stop = testenv.Go(t, "agent Run", svc.Run)
	h.stops = append(h.stops, stop)
	bustest.WaitConsumer(t, h.b, envelope.SubjectInbound+".x", ConsumerInbound, 10*time.Second)
	for _, name := range []string{ConsumerResults, ConsumerFailed} {
		bustest.WaitConsumer(t, h.b, envelope.SubjectToolResult, name, 10*time.Second)
	}
	return stop
}

// idle returns another agent on h's bus that does not run: a test calls its
// handlers directly, as a second process (or one that crashed and came back)
// would handle a delivery. leaseTTL, when not zero, is its lease's length.
func (h *harness) idle(t testing.TB, leaseTTL time.Duration) *Service {
	t.Helper()
	svc, err := New(t.Context(), Config{Model: h.llm.model(t), Logger: testenv.Logger(t, slog.LevelWarn), LeaseTTL: leaseTTL}, h.b)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func (h *harness) publish(t testing.TB, subject string, e *envelope.Envelope) {
	t.Helper()
	if _, err := h.b.Publish(t.Context(), subject, e, bus.WithMsgID("test:"+e.ID+":"+fmt.Sprint(time.Now().UnixNano()))); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

// next returns the next envelope the agent published on agent.>.
func (h *harness) next(t testing.TB) *envelope.Envelope {
	t.Helper()
	return testenv.Receive(t, h.out, 30*time.Second, "an envelope on agent.>")
}

// none asserts that nothing more arrives on agent.> for a short while.
func (h *harness) none(t testing.TB) {
	t.Helper()
	testenv.Quiet(t, h.out, 300*time.Millisecond, "envelope on agent.>")
}

// drained waits until a consumer has handled everything delivered to it.
func (h *harness) drained(t testing.TB, name, subject string) {
	t.Helper()
	bustest.WaitDrained(t, h.b, subject, name, 10*time.Second)
}

// ---- inbound envelopes as the mappers produce them ----

func githubIssueOpened() *envelope.Envelope {
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser,
		"Codertocat opened issue #1 in Codertocat/Hello-World: Spelling error in the README file\n\nIt looks like you accidently spelled 'commit' with two 't's.")
	e.Meta.Thread = "github:Codertocat/Hello-World#1"
	e.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", DeliveryID: "d-1",
		URL: "https://github.com/Codertocat/Hello-World/issues/1", Actor: "Codertocat"}
	e.Meta.Budget = &envelope.Budget{Tokens: 38}
	return e
}

func githubComment(body, actor string) *envelope.Envelope {
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser,
		actor+" commented on issue #1 in Codertocat/Hello-World: Spelling error in the README file\n\n"+body)
	e.Meta.Thread = "github:Codertocat/Hello-World#1"
	e.Meta.Source = &envelope.Source{Event: "issue_comment", Action: "created", DeliveryID: "d-2",
		URL: "https://github.com/Codertocat/Hello-World/issues/1#issuecomment-1", Actor: actor}
	return e
}

func slackMention(bot, edit bool) *envelope.Envelope {
	e := envelope.New(envelope.ChannelSlack, envelope.RoleUser,
		"<@U061F7AUR> mentioned the app in <#C0LAN2Q65>: <@U0LAN0Z89> summarize issue relaystation/relay#42 please")
	e.Meta.Thread = "slack:T123ABC456/C0LAN2Q65/1700000000.000100"
	e.Meta.Source = &envelope.Source{Event: "app_mention", DeliveryID: "Ev06ABCDE12", Actor: "U061F7AUR"}
	e.Meta.Set("slack", map[string]any{"team": "T123ABC456", "channel": "C0LAN2Q65", "ts": "1700000123.000200",
		"thread_ts": "1700000000.000100", "user": "U061F7AUR", "bot": bot, "edit": edit})
	return e
}
