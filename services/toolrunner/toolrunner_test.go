package toolrunner

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

type msgIn struct {
	Message string `json:"message"`
}

// mcpServer is an in-process SDK server over streamable HTTP with a
// read-only echo and a side-effecting write that counts its runs.
func mcpServer(t testing.TB) (url string, writes *atomic.Int32) {
	t.Helper()
	writes = new(atomic.Int32)
	s := mcp.NewServer(&mcp.Implementation{Name: "svc-test", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + in.Message}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "write"},
		func(_ context.Context, _ *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
			writes.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "wrote " + in.Message}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, writes
}

type fixture struct {
	b      *bus.Bus
	svc    *Service
	writes *atomic.Int32
	audit  string
	// stop cancels Run and waits for it to return (once).
	stop func()
}

func start(t *testing.T, extra ...mcpconfig.Server) *fixture {
	t.Helper()
	url, writes := mcpServer(t)
	b := bustest.Embedded(t)
	pol := toolstest.Policy(t, "roles:\n  - role: agent\n    capabilities: ['svc.*', 'dead.*']\n  - role: reader\n    capabilities: ['svc.echo']\n")
	auditPath := filepath.Join(t.TempDir(), "tools.jsonl")
	servers := append([]mcpconfig.Server{{Name: "svc", Type: mcpconfig.HTTP, URL: url, ProtocolVersion: mcpconfig.DefaultProtocolVersion}}, extra...)
	svc, err := New(t.Context(), Config{Logger: testenv.Logger(t, slog.LevelWarn), NoticeChannel: opsChannel, Tools: tools.Config{
		Servers: servers, Policy: pol, AuditPath: auditPath,
		HealthInterval: 200 * time.Millisecond,
		HealthBackoff:  []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond},
	}}, b)
	if err != nil {
		t.Fatal(err)
	}
	stop := testenv.Go(t, "Run", svc.Run)
	f := &fixture{b: b, svc: svc, writes: writes, audit: auditPath, stop: stop}
	testenv.WaitFor(t, 20*time.Second, "svc ready", func() bool { return svc.Runner().Servers()[0].State == tools.StateReady })
	return f
}

func TestReadyNamesServersOnTheirFirstAttempt(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never answers keeps its first
	// handshake open until the listener goes away.
	l := testenv.Listen(t)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	f := start(t, mcpconfig.Server{Name: "mute", Type: mcpconfig.HTTP, URL: "http://" + l.Addr().String() + "/mcp", ProtocolVersion: mcpconfig.DefaultProtocolVersion})
	testenv.WaitFor(t, 20*time.Second, "svc's first discovery", func() bool { return slices.Equal(f.svc.Runner().Pending(), []string{"mute"}) })
	if err := f.svc.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "mute") || strings.Contains(err.Error(), "svc") {
		t.Fatalf("got %v, want an error naming mute only", err)
	}
	st, err := tools.StatusRemote(t.Context(), f.b.Conn(), f.b.Prefix())
	if err != nil || len(st.Pending) != 1 || st.Pending[0] != "mute" {
		t.Fatalf("status: got %+v, %v; want mute pending", st, err)
	}
	_ = l.Close()
	mu.Lock()
	for _, c := range conns {
		_ = c.Close()
	}
	mu.Unlock()
	testenv.WaitFor(t, 20*time.Second, "mute's first attempt to end", func() bool { return f.svc.Ready(t.Context()) == nil })
}

func next(t *testing.T, ch <-chan *envelope.Envelope) *envelope.Envelope {
	t.Helper()
	return testenv.Receive(t, ch, 20*time.Second, "an envelope")
}

func toolCall(name, role string, args map[string]any) *envelope.Envelope {
	e := envelope.New(envelope.ChannelSlack, envelope.RoleAssistant, "calling "+name)
	e.Meta.Thread = "slack:T1/C1/1700000000.000100"
	e.Meta.TaskID = "task-42"
	e.Meta.Set("agent", map[string]any{"id": "agent-1", "role": role})
	e.ToolCall = &envelope.ToolCall{ID: "call_1", Name: name, Args: args}
	return e
}

func TestResultsAndFailuresAreRouted(t *testing.T) {
	t.Parallel()
	f := start(t)
	results := bustest.Observe(t, f.b, "obs-result", envelope.SubjectToolResult)
	failed := bustest.Observe(t, f.b, "obs-failed", envelope.SubjectToolFailed)
	audits := bustest.Observe(t, f.b, "obs-audit", SubjectAudit)

	call := toolCall("svc.echo", "agent", map[string]any{"message": "hi"})
	if _, err := f.b.Publish(t.Context(), envelope.SubjectToolCall, call); err != nil {
		t.Fatal(err)
	}
	got := next(t, results)
	if got.Role != envelope.RoleTool || got.Meta.Thread != call.Meta.Thread || got.Meta.TaskID != "task-42" ||
		got.ToolCall == nil || got.ToolCall.ID != "call_1" || got.ToolCall.Result["text"] != "Echo: hi" ||
		got.ToolCall.Result["status"] != "success" || got.Content != "Echo: hi" || got.Meta.GetString("in_reply_to") != call.ID {
		b, _ := json.Marshal(got)
		t.Fatalf("result envelope: %s", b)
	}
	if err := envelope.Validate(got); err != nil {
		t.Errorf("result envelope invalid: %v", err)
	}

	tests := []struct {
		name, tool, role, status string
	}{
		{"capability denied", "svc.write", "reader", "permission_denied"},
		{"unknown tool", "svc.nope", "agent", "error"},
		{"invalid arguments", "svc.echo", "agent", "error"},
	}
	for _, tt := range tests {
		args := map[string]any{"message": "x"}
		if tt.name == "invalid arguments" {
			args = map[string]any{"message": 3}
		}
		c := toolCall(tt.tool, tt.role, args)
		if _, err := f.b.Publish(t.Context(), envelope.SubjectToolCall, c); err != nil {
			t.Fatal(err)
		}
		got := next(t, failed)
		res := got.ToolCall.Result
		if res["status"] != tt.status || res["error"] == nil || got.Meta.GetString("in_reply_to") != c.ID {
			t.Errorf("%s: got result %v, want status %s with error", tt.name, res, tt.status)
		}
	}
	if f.writes.Load() != 0 {
		t.Errorf("denied write ran %d times", f.writes.Load())
	}
	a := next(t, audits)
	rec, _ := a.Meta.Get("audit")
	m, _ := rec.(map[string]any)
	if a.Role != envelope.RoleSystem || m["server"] != "svc" || m["tool"] != "echo" || m["agent_id"] != "agent-1" || m["role"] != "agent" || m["args_sha256"] == nil {
		t.Errorf("audit envelope meta.audit = %v", rec)
	}
	if _, has := m["args"]; has {
		t.Error("audit envelope holds raw arguments")
	}
}

func TestRedeliveryDoesNotRepeatSideEffects(t *testing.T) {
	t.Parallel()
	f := start(t)
	results := bustest.Observe(t, f.b, "obs", envelope.SubjectToolResult)
	call := toolCall("svc.write", "agent", map[string]any{"message": "once"})
	// The same envelope twice, as a redelivery would bring it (a distinct
	// Nats-Msg-Id keeps JetStream from dropping the second).
	for i, id := range []string{call.ID, call.ID + "-again"} {
		if _, err := f.b.Publish(t.Context(), envelope.SubjectToolCall, call, bus.WithMsgID(id)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	got := next(t, results)
	if got.ToolCall.Result["text"] != "wrote once" {
		t.Fatalf("got %v", got.ToolCall.Result)
	}
	bustest.WaitDrained(t, f.b, envelope.SubjectToolCall, "toolrunner", 20*time.Second)
	if n := f.writes.Load(); n != 1 {
		t.Errorf("write ran %d times, want 1", n)
	}
	if n := countSubject(t, f.b, envelope.SubjectToolResult); n != 1 {
		t.Errorf("%d results stored, want 1 (the second publish de-duplicated)", n)
	}

	// JetStream redelivers a call whose earlier delivery claimed it and
	// never finished: a side-effecting tool is not repeated...
	failed := bustest.Observe(t, f.b, "obs-failed", envelope.SubjectToolFailed)
	interrupted := func(tool string) *envelope.Envelope {
		c := toolCall(tool, "agent", map[string]any{"message": "again"})
		b, _ := json.Marshal(callRecord{State: "running", Seq: 9999, At: time.Now()})
		if _, err := f.svc.calls.Put(t.Context(), c.ID, b); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Handle(t.Context(), &bus.Message{Envelope: c, Subject: envelope.SubjectToolCall, StreamSeq: 9999, Delivered: 2}); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		return c
	}
	interrupted("svc.write")
	got = next(t, failed)
	if got.ToolCall.Result["status"] != "error" || f.writes.Load() != 1 {
		t.Errorf("interrupted write: got %v with %d writes, want a failure and no second write", got.ToolCall.Result, f.writes.Load())
	}
	// ... a read-only one is.
	interrupted("svc.echo")
	if got := next(t, results); got.ToolCall.Result["text"] != "Echo: again" {
		t.Errorf("interrupted read-only call: got %v", got.ToolCall.Result)
	}
}

func TestMalformedCallIsDeadLettered(t *testing.T) {
	t.Parallel()
	f := start(t)
	e := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, "no tool call")
	if _, err := f.b.Publish(t.Context(), envelope.SubjectToolCall, e); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "dead letter", func() bool {
		dls, err := f.b.DeadLetters(t.Context(), 0)
		return err == nil && len(dls) == 1 && dls[0].Consumer == "toolrunner"
	})
}

func TestToolListOverBus(t *testing.T) {
	t.Parallel()
	f := start(t)
	other := bustest.Connect(t, f.b)
	list, err := tools.ListRemote(t.Context(), other.Conn(), other.Prefix(), "reader")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "svc.echo" || list[0].InputSchema == nil {
		t.Fatalf("reader tools: got %+v, want svc.echo", list)
	}
	if list, _ := tools.ListRemote(t.Context(), other.Conn(), other.Prefix(), "agent"); len(list) != 2 {
		t.Errorf("agent tools: got %d, want 2", len(list))
	}
	st, err := tools.StatusRemote(t.Context(), other.Conn(), other.Prefix())
	if err != nil || len(st.Servers) != 1 || st.Servers[0].State != tools.StateReady {
		t.Errorf("status: got %+v, %v", st, err)
	}
}

const opsChannel = "C0OPS"

func TestAutoDisableNoticeAndRemoteEnable(t *testing.T) {
	t.Parallel()
	deadURL := "http://" + testenv.FreeAddr(t) + "/mcp"
	f := start(t, mcpconfig.Server{Name: "dead", Type: mcpconfig.HTTP, URL: deadURL, ProtocolVersion: mcpconfig.DefaultProtocolVersion})
	notices := bustest.Observe(t, f.b, "obs", SubjectNotice)
	human := bustest.Observe(t, f.b, "obs-human", SubjectHumanNotice)
	n := next(t, notices)
	if n.Role != envelope.RoleSystem || n.Channel != envelope.ChannelInternal {
		t.Errorf("notice: got %s/%s", n.Role, n.Channel)
	}
	meta, _ := n.Meta.Get("notice")
	if m, _ := meta.(map[string]any); m["server"] != "dead" || m["kind"] != tools.NoticeAutoDisabled {
		t.Errorf("notice meta: got %v", meta)
	}
	// The same words go to the ops channel in Slack (the outbound worker
	// posts agent.notice to its Slack target).
	h := next(t, human)
	if tg, err := h.Meta.Target(); err != nil || tg == nil || tg.Channel != "slack" || tg.SlackCh != opsChannel ||
		!strings.Contains(h.Content, `"dead" was auto-disabled after 3 failed health checks`) {
		t.Errorf("Slack notice: got target %+v (%v), content %q", tg, err, h.Content)
	}
	// Another process (the CLI) sees it disabled and enables it.
	other := bustest.Connect(t, f.b)
	st, err := OpenState(t.Context(), other)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "persisted auto-disable", func() bool {
		s, err := st.Load(t.Context())
		return err == nil && s.Servers["dead"].Disabled && s.Servers["dead"].By == "health"
	})
	if err := st.SetServer(t.Context(), "dead", tools.ServerState{Disabled: false, By: "operator", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "runner to see the enable", func() bool {
		s := f.svc.Runner().Servers()[1]
		return s.State != tools.StateDisabled || s.Failures > 0
	})
	// Re-enabling an auto-disabled server is announced once, in both places.
	for _, ch := range []<-chan *envelope.Envelope{notices, human} {
		n := next(t, ch)
		if meta, _ := n.Meta.Get("notice"); meta.(map[string]any)["kind"] != tools.NoticeReenabled || !strings.Contains(n.Content, "enabled again") {
			t.Errorf("after enable: got %v %q, want a re-enable notice", meta, n.Content)
		}
	}
	// The stop switch set from the other process stops execution.
	if err := st.SetStop(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "stop switch", f.svc.Runner().Stopped)
	res := f.svc.Runner().Call(t.Context(), tools.Request{Tool: "svc.echo", Args: map[string]any{"message": "x"}, Caller: tools.Caller{Role: "agent"}})
	if res.Status != tools.StatusDisabled {
		t.Errorf("call with stop switch on: got %s", res.Status)
	}
}

func countSubject(t *testing.T, b *bus.Bus, rel string) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), b.StreamName(rel))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(b.Subject(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[b.Subject(rel)]
}

// TestReplayTakesOverAbandonedClaim: a call whose delivery claimed it and
// was dead-lettered before its reply was stored is answered when the dead
// letter is replayed (`relay dlq replay`: a new message for this consumer),
// instead of being left to an owner that will never come back.
func TestReplayTakesOverAbandonedClaim(t *testing.T) {
	t.Parallel()
	f := start(t)
	results := bustest.Observe(t, f.b, "obs", envelope.SubjectToolResult)
	c := toolCall("svc.echo", "agent", map[string]any{"message": "replayed"})
	b, _ := json.Marshal(callRecord{State: "running", Seq: 9999, At: time.Now()})
	if _, err := f.svc.calls.Put(t.Context(), c.ID, b); err != nil {
		t.Fatal(err)
	}
	replay := &bus.Message{Envelope: c, Subject: envelope.SubjectToolCall, StreamSeq: 10000, Delivered: 1,
		Header: nats.Header{bus.HeaderReplayFor: []string{"toolrunner"}}}
	if err := f.svc.Handle(t.Context(), replay); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if got := next(t, results); got.ToolCall.Result["text"] != "Echo: replayed" {
		t.Errorf("replayed call: got %v, want its result", got.ToolCall.Result)
	}
}
