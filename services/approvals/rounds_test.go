package approvals_test

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/approvals"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

// TestInputRequiredSurvivesToolRunnerKill: a 2026-07-28 server's
// input-required question (SEP-2322) is posted in the call's Slack thread by
// tool runner A, which is then killed (its NATS connection drops, then it
// stops); the author answers through the Slack form. Tool runner B takes the
// redelivered call, finds the round in JetStream, attaches to the same
// question (no second post) and sends the call again with the answer and the
// request state: one result, one audit record, one effect on the server.
// The author answers before B runs, or after B has attached. A runner that
// is shut down instead (its context cancelled) hands the call over the same
// way once its grace period is over.
func TestInputRequiredSurvivesToolRunnerKill(t *testing.T) {
	t.Parallel()
	for _, kill := range []bool{true, false} {
		for _, afterResume := range []bool{false, true} {
			name := map[bool]string{true: "killed, ", false: "shut down, "}[kill] +
				map[bool]string{false: "answered while no runner waits", true: "answered after the resume"}[afterResume]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testRoundKill(t, kill, afterResume)
			})
		}
	}
}

// runnerProc is a tool runner as its own process would be: its own NATS
// connection and service.
type runnerProc struct {
	bus   *bus.Bus
	audit string
	stop  func()
}

func startToolRunner(t *testing.T, h *harness, url, name string) *runnerProc {
	t.Helper()
	b := bustest.Connect(t, h.bus)
	p := &runnerProc{bus: b, audit: filepath.Join(t.TempDir(), name+".jsonl")}
	svc, err := toolrunner.New(t.Context(), toolrunner.Config{
		AckWait:       2 * time.Second,
		ShutdownGrace: 100 * time.Millisecond,
		Logger:        testenv.Logger(t, slog.LevelWarn).With("runner", name),
		Tools: tools.Config{
			Servers:   []mcpconfig.Server{{Name: "deploy", Type: mcpconfig.HTTP, URL: url}},
			Policy:    toolstest.Policy(t, "roles:\n  - role: agent\n    capabilities: ['deploy.*']\n"),
			AuditPath: p.audit,
		},
	}, b)
	if err != nil {
		t.Fatal(err)
	}
	p.stop = testenv.Go(t, name, svc.Run)
	toolstest.Ready(t, svc.Runner())
	return p
}

func testRoundKill(t *testing.T, kill, afterResume bool) {
	h := newHarness(t)
	h.serving()
	srv := toolstest.StartInputRequired(t)
	results := bustest.Observe(t, h.bus, "obs-result", envelope.SubjectToolResult)
	failed := bustest.Observe(t, h.bus, "obs-failed", envelope.SubjectToolFailed)

	a := startToolRunner(t, h, srv.URL, "A")
	call := envelope.New(envelope.ChannelSlack, envelope.RoleAssistant, "calling deploy.release")
	call.Meta.Thread = "slack:" + team + "/" + threadCh + "/" + threadTS
	call.Meta.TaskID = "task-round"
	call.Meta.Set("agent", map[string]any{"id": "agent-1", "role": "agent"})
	call.Meta.Set("acts_for", author)
	call.ToolCall = &envelope.ToolCall{ID: "call_1", Name: "deploy.release", Args: map[string]any{}}
	h.publish(envelope.SubjectToolCall, call)

	post := h.posted(1)
	id := post.Actions()[0].Value
	if post.Params["thread_ts"] != threadTS {
		t.Fatalf("question posted in %q, want the call's thread", post.Params["thread_ts"])
	}
	if kill {
		// Its connection drops as a dead process's does, then it stops.
		a.bus.Conn().Close()
	}
	a.stop()

	answer := func() { h.selectAnswer(post, "env", "production") }
	if !afterResume {
		answer()
		testenv.WaitFor(t, 10*time.Second, "the answer recorded", func() bool {
			q := questionRecord(t, h, id)
			t.Logf("question %s: %+v", id, q)
			return q.Status == tools.ElicitAccept
		})
	}
	first := questionRecord(t, h, id).Reply
	b := startToolRunner(t, h, srv.URL, "B")
	if afterResume {
		testenv.WaitFor(t, 20*time.Second, "runner B to attach to the question", func() bool { return questionRecord(t, h, id).Reply != first })
		answer()
	}

	res := testenv.Receive(t, results, 30*time.Second, "the call's result")
	if want := "released state=state-1 q0=accept:production roots=0"; res.Content != want {
		t.Fatalf("result %q, want %q", res.Content, want)
	}
	if c, e := srv.Calls.Load(), srv.Effects.Load(); c != 2 || e != 1 {
		t.Errorf("server saw %d calls and %d effects, want 2 and 1", c, e)
	}
	if n := len(h.slack.Calls("chat.postMessage")); n != 1 {
		t.Errorf("%d questions posted, want 1 (the resume attaches to the first)", n)
	}
	if recs := toolstest.AuditRecords(t, a.audit); len(recs) != 0 {
		t.Errorf("killed runner A wrote %d audit records, want 0", len(recs))
	}
	b.stop() // flushes B's audit log
	if recs := toolstest.AuditRecords(t, b.audit); len(recs) != 1 || recs[0].CallID != call.ID || recs[0].Status != tools.StatusSuccess {
		t.Errorf("runner B's audit records %+v, want one success of %s", recs, call.ID)
	}
	select {
	case f := <-failed:
		t.Errorf("a failure was published too: %s", f.Content)
	default:
	}
	kv, err := h.bus.JetStream().KeyValue(t.Context(), toolrunner.RoundBucket(h.bus.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.ListKeys(t.Context()); err != nil {
		t.Fatal(err)
	} else {
		for k := range keys.Keys() {
			t.Errorf("round %s left after the call completed", k)
		}
	}
}

type questionRec struct {
	Reply  string `json:"reply"`
	Status string `json:"status"`
}

// questionRecord reads the approvals worker's record of question id.
func questionRecord(t *testing.T, h *harness, id string) questionRec {
	t.Helper()
	kv, err := h.bus.JetStream().KeyValue(t.Context(), approvals.ElicitBucket(h.bus.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), id)
	if err != nil && err != jetstream.ErrKeyNotFound {
		t.Fatal(err)
	}
	var q questionRec
	if e != nil {
		_ = json.Unmarshal(e.Value(), &q)
	}
	return q
}
