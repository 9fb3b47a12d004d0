package hooks_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/hooks"
)

const echoIssuesFile = `
hooks:
  - name: echo-issues
    on: ["github.issues.opened"]
    actions:
      - {type: mcp, parameters: {serverId: everything, toolName: echo, parameterMappings: [{toolParam: message, source: context, value: url}]}}
`

// TestTakeOverRunOfADeadDelivery: a delivery that claimed a hook action and
// died (the process killed after the claim, before or after it sent the tool
// call) leaves the run "running". The redelivery of that message takes it
// over and finishes it; the tool runner, which claims call ids, runs the tool
// once either way. A run claimed by another message stays its owner's.
func TestTakeOverRunOfADeadDelivery(t *testing.T) {
	t.Parallel()
	r := start(t, echoIssuesFile)
	ctx := t.Context()
	runs, err := r.b.JetStream().KeyValue(ctx, hooks.RunBucket(r.b.Prefix()))
	if err != nil {
		t.Fatal(err)
	}
	results := bustest.Observe(t, r.b, "observe-results", envelope.SubjectToolResult)
	claim := func(e *envelope.Envelope, seq uint64) string {
		t.Helper()
		key := hooks.RunKey("echo-issues", 1, e.ID)
		b, _ := json.Marshal(map[string]any{"state": "running", "seq": seq})
		if _, err := runs.Create(ctx, key, b); err != nil {
			t.Fatal(err)
		}
		return key
	}
	audited := func(n int) {
		t.Helper()
		testenv.Poll(t, 10*time.Second, func() (bool, string) {
			raw, _ := os.ReadFile(r.audit)
			got := strings.Count(string(raw), `"agent_id":"hook:echo-issues"`)
			if got > n {
				t.Fatalf("the tool ran %d times, want %d:\n%s", got, n, raw)
			}
			return got == n, "audit records of hook:echo-issues"
		})
	}

	t.Run("the dead delivery had sent the call", func(t *testing.T) {
		it := issueOpened(t)
		key := claim(it.Envelope, 41)
		// What the dead delivery sent: the call the tool runner then ran.
		call := it.Envelope.Reply(it.Envelope.Channel, envelope.RoleAssistant, "hook echo-issues calls everything.echo")
		call.ID = hooks.HookCallID(key)
		call.ToolCall = &envelope.ToolCall{ID: key, Name: "everything.echo", Args: map[string]any{"message": "first"}}
		call.Meta.Set("agent", map[string]any{"id": "hook:echo-issues", "role": "hooks"})
		if _, err := r.b.Publish(ctx, envelope.SubjectToolCall, call, bus.WithMsgID("hook-call-"+key)); err != nil {
			t.Fatal(err)
		}
		testenv.Receive(t, results, 30*time.Second, "the first attempt's result")
		audited(1)
		if err := r.svc.Handle(ctx, &bus.Message{Envelope: it.Envelope, StreamSeq: 41}); err != nil {
			t.Fatal(err)
		}
		x := record(t, r.executed)
		if x.EnvelopeID != it.Envelope.ID || x.Status != hooks.StatusSuccess || !strings.Contains(x.Result, "first") {
			t.Errorf("record %+v: want the first attempt's result, success", x)
		}
		audited(1)
	})

	t.Run("the dead delivery had not sent the call", func(t *testing.T) {
		it := issueOpened(t)
		claim(it.Envelope, 42)
		if err := r.svc.Handle(ctx, &bus.Message{Envelope: it.Envelope, StreamSeq: 42}); err != nil {
			t.Fatal(err)
		}
		x := record(t, r.executed)
		if x.EnvelopeID != it.Envelope.ID || x.Status != hooks.StatusSuccess {
			t.Errorf("record %+v: want the run finished, success", x)
		}
		audited(2)
	})

	t.Run("claimed by another message", func(t *testing.T) {
		it := issueOpened(t)
		claim(it.Envelope, 43)
		if err := r.svc.Handle(ctx, &bus.Message{Envelope: it.Envelope, StreamSeq: 44}); err != nil {
			t.Fatal(err)
		}
		testenv.Quiet(t, r.executed, 500*time.Millisecond, "a run claimed by another message")
		audited(2)
	})
}
