package hooks_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/story"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/hooks"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

// everything returns the stdio server-everything of testdata/npm.
func everything(t testing.TB) mcpconfig.Server {
	t.Helper()
	bin := testenv.NPMBin(t, "mcp-server-everything")
	return mcpconfig.Server{Name: "everything", Type: mcpconfig.Stdio, Command: bin, Args: []string{"stdio"},
		ProtocolVersion: mcpconfig.DefaultProtocolVersion}
}

type rig struct {
	b        *bus.Bus
	tr       *toolrunner.Service
	svc      *hooks.Service
	audit    string
	executed <-chan *envelope.Envelope
	calls    <-chan *envelope.Envelope
}

const policy = "roles:\n  - role: hooks\n    capabilities: ['everything.*', 'gone.*']\n"

// start runs a real tool runner (server-everything over stdio, plus the
// extra servers) and the hooks service with file on an in-process NATS.
func start(t testing.TB, file string, extra ...mcpconfig.Server) *rig {
	t.Helper()
	b := bustest.Embedded(t)
	pol := toolstest.Policy(t, policy)
	audit := filepath.Join(t.TempDir(), "tools.jsonl")
	tr, err := toolrunner.New(t.Context(), toolrunner.Config{Tools: tools.Config{
		Servers: append([]mcpconfig.Server{everything(t)}, extra...), Policy: pol, AuditPath: audit,
		// A failing server is retried at once, then every second: it stays
		// offline (not auto-disabled) for the whole test however slow the machine.
		HealthBackoff: []time.Duration{20 * time.Millisecond, time.Second}, DisableAfter: 100,
	}}, b)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, "toolrunner Run", tr.Run)
	testenv.WaitFor(t, 30*time.Second, "server-everything ready", func() bool {
		return tr.Runner().Servers()[0].State == tools.StateReady
	})
	f, err := hooks.Parse([]byte(file), "hooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := hooks.New(t.Context(), hooks.Config{Hooks: f}, b)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{b: b, tr: tr, svc: svc, audit: audit,
		executed: bustest.Observe(t, b, "observe-executed", hooks.SubjectExecuted),
		calls:    bustest.Observe(t, b, "observe-calls", envelope.SubjectToolCall)}
	testenv.Go(t, "hooks Run", svc.Run)
	// The consumer starts at new envelopes: publish once it exists.
	bustest.WaitConsumer(t, b, "in.github.issues", "hooks", 10*time.Second)
	return r
}

// issueOpened maps the real issues.opened example through the GitHub mapper.
func issueOpened(t *testing.T) mappers.Item {
	t.Helper()
	return octokitItem(t, "issues", "opened", nil)
}

// octokitItem maps the first @octokit/webhooks-examples payload of event and
// action through the GitHub mapper, after edit (when not nil) changes the
// decoded payload.
func octokitItem(t *testing.T, event, action string, edit func(p map[string]any)) mappers.Item {
	t.Helper()
	for _, ex := range mapperstest.OctokitExamples(t) {
		var p map[string]any
		if err := json.Unmarshal(ex.Payload, &p); err != nil || ex.Event != event || p["action"] != action {
			continue
		}
		body := ex.Payload
		if edit != nil {
			edit(p)
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			body = b
		}
		h := http.Header{}
		h.Set(github.HeaderEvent, event)
		h.Set(github.HeaderDelivery, "d-"+bustest.RandomPrefix())
		res, err := github.New(github.Config{}).Map(&mappers.Request{Header: h, Body: body, Received: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return res.Items[0]
	}
	t.Fatalf("no %s.%s example", event, action)
	return mappers.Item{}
}

func (r *rig) publish(t *testing.T, it mappers.Item) {
	t.Helper()
	if _, err := r.b.Publish(t.Context(), it.Subject, it.Envelope, bus.WithMsgID(it.MsgID)); err != nil {
		t.Fatal(err)
	}
}

func record(t *testing.T, ch <-chan *envelope.Envelope) *hooks.Execution {
	t.Helper()
	e := testenv.Receive(t, ch, 30*time.Second, "hook.executed record")
	x, ok := hooks.ExecutionOf(e)
	if !ok {
		t.Fatalf("hook.executed envelope %s has no meta.hook_execution", e.ID)
	}
	return x
}

const greetFile = `
hooks:
  - name: greet-new-issues
    on: ["github.issues.opened"]
    if: 'repository == "Codertocat/Hello-World" && "Codertocat" in [actor, "someone"]'
    actions:
      - type: mcp
        parameters:
          serverId: everything
          toolName: echo
          parameterMappings:
            - {toolParam: message, source: template, value: "{{.actor}} opened {{.url}} ({{.repository}}#{{.number}})"}
        reply: thread
      - type: mcp
        parameters:
          serverId: everything
          toolName: get-sum
          timeout: 20000
          parameterMappings:
            - {toolParam: a, source: literal, value: "40"}
            - {toolParam: b, source: context, value: number}
  - name: never
    on: ["github.issues.opened"]
    if: 'repository == "someone/else"'
    actions:
      - type: mcp
        parameters: {serverId: everything, toolName: echo, parameterMappings: [{toolParam: message, source: literal, value: x}]}
`

// TestHookFiresOnIssueOpened: a real issues.opened webhook runs both
// actions through the tool runner, with each mapping source, records both
// and answers the thread; the hook whose condition fails runs nothing.
func TestHookFiresOnIssueOpened(t *testing.T) {
	t.Parallel()
	r := start(t, greetFile)
	suggestions := bustest.Observe(t, r.b, "observe-suggestions", hooks.SubjectSuggestion)
	it := issueOpened(t)
	r.publish(t, it)

	x1 := record(t, r.executed)
	if x1.Hook != "greet-new-issues" || x1.Action != 1 || x1.Status != hooks.StatusSuccess {
		t.Fatalf("first record: got %+v, want greet-new-issues action 1 success", x1)
	}
	want := "Codertocat opened https://github.com/Codertocat/Hello-World/issues/1 (Codertocat/Hello-World#1)"
	if got := x1.Params["message"]; got != want {
		t.Errorf("resolved message: got %q, want %q", got, want)
	}
	if !strings.Contains(x1.Result, want) {
		t.Errorf("result: got %q, want the echo of %q", x1.Result, want)
	}
	if x1.EnvelopeID != it.Envelope.ID || x1.Thread != "github:Codertocat/Hello-World#1" || x1.ServerStatus == nil || x1.ServerStatus.State != tools.StateReady {
		t.Errorf("record: got envelope %s thread %q status %+v", x1.EnvelopeID, x1.Thread, x1.ServerStatus)
	}
	if !strings.HasPrefix(x1.Reply, "posted to ") {
		t.Errorf("reply: got %q, want posted", x1.Reply)
	}

	x2 := record(t, r.executed)
	if x2.Action != 2 || x2.Status != hooks.StatusSuccess || !strings.Contains(x2.Result, "41") {
		t.Fatalf("second record: got %+v, want get-sum success with 41", x2)
	}
	if x1.DeliveryID == "" || x1.DeliveryID != it.Envelope.Meta.Source.DeliveryID {
		t.Errorf("record: got delivery id %q, want the webhook's %q", x1.DeliveryID, it.Envelope.Meta.Source.DeliveryID)
	}
	// relay trace and the console's Story page find both executions by the
	// webhook's delivery id and by its task id, as by its thread.
	for _, q := range []string{x1.DeliveryID, envelope.TaskOf(it.Envelope.ID), x1.Thread} {
		st, err := story.Build(t.Context(), r.b, q)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, h := range st.Hops {
			if h.Kind == story.KindHook {
				n++
			}
		}
		if n != 2 {
			t.Errorf("story of %s: %d hook hops, want 2", q, n)
		}
	}
	if a, _ := x2.Params["a"].(float64); a != 40 {
		t.Errorf("literal \"40\" for a number parameter: got %#v, want 40", x2.Params["a"])
	}

	s := testenv.Receive(t, suggestions, 30*time.Second, "agent.suggestion")
	target, err := s.Meta.Target()
	if err != nil || target == nil || target.Owner != "Codertocat" || target.Number != 1 || !strings.Contains(s.Content, want) {
		t.Errorf("suggestion: got target %+v (%v) content %q", target, err, s.Content)
	}
	// The audit log names the hook (its lines are written in batches, within
	// tools.AuditFlushDelay of the call).
	testenv.Poll(t, 10*time.Second, func() (bool, string) {
		raw, err := os.ReadFile(r.audit)
		if n := strings.Count(string(raw), `"agent_id":"hook:greet-new-issues"`); err != nil || n > 2 {
			t.Fatalf("audit log: got %s (%v), want two records of agent hook:greet-new-issues", raw, err)
		} else if n < 2 {
			return false, fmt.Sprintf("audit log: %d records of agent hook:greet-new-issues, want 2:\n%s", n, raw)
		}
		return true, ""
	})
	testenv.Quiet(t, r.executed, 500*time.Millisecond, "record of the hook whose condition fails")
}

// TestRedeliveryRunsNothingTwice: the same envelope handled again (a
// redelivery, or a second instance) calls no tool and adds no record.
func TestRedeliveryRunsNothingTwice(t *testing.T) {
	t.Parallel()
	r := start(t, greetFile)
	it := issueOpened(t)
	r.publish(t, it)
	for range 2 {
		record(t, r.executed)
		testenv.Receive(t, r.calls, 30*time.Second, "tool.call")
	}
	data, _ := it.Envelope.Marshal()
	m := &bus.Message{Envelope: it.Envelope, Subject: it.Subject, Data: data, Delivered: 2, StreamSeq: 1}
	if err := r.svc.Handle(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	// The same envelope published again under another message id reaches
	// the consumer as a new message.
	if _, err := r.b.Publish(t.Context(), it.Subject, it.Envelope, bus.WithMsgID(it.MsgID+"-again")); err != nil {
		t.Fatal(err)
	}
	testenv.Quiet(t, r.calls, time.Second, "second tool call")
	testenv.Quiet(t, r.executed, 200*time.Millisecond, "second record")
}

// TestOfflineServerSkips: an action on a server that is offline is
// recorded as skipped, without a call, and the message is acked.
func TestOfflineServerSkips(t *testing.T) {
	t.Parallel()
	gone := mcpconfig.Server{Name: "gone", Type: mcpconfig.Stdio, Command: "/bin/false", ProtocolVersion: mcpconfig.DefaultProtocolVersion}
	r := start(t, `
hooks:
  - name: to-the-void
    on: ["github.issues.*"]
    actions:
      - type: mcp
        parameters: {serverId: gone, toolName: echo, parameterMappings: [{toolParam: message, source: context, value: title}]}
`, gone)
	testenv.WaitFor(t, 30*time.Second, "gone offline", func() bool {
		st, err := tools.StatusRemote(t.Context(), r.b.Conn(), r.b.Prefix())
		if err != nil {
			return false
		}
		for _, s := range st.Servers {
			if s.Name == "gone" && s.State == tools.StateOffline {
				return true
			}
		}
		return false
	})
	r.publish(t, issueOpened(t))
	x := record(t, r.executed)
	if x.Status != hooks.StatusSkipped || !(strings.Contains(x.Error, "offline") || strings.Contains(x.Error, "connecting")) || x.ServerStatus == nil {
		t.Fatalf("got %+v, want skipped naming offline (or connecting, between retries) with the server's status", x)
	}
	testenv.Quiet(t, r.calls, 300*time.Millisecond, "tool call to an offline server")
	// Acked: the consumer has nothing pending.
	bustest.WaitDrained(t, r.b, "in.github.issues", "hooks", 10*time.Second)
}

// TestTimeoutAndInvalid: an action whose tool answers after its timeout is
// recorded as timeout; parameters that do not fit the tool's schema, or a
// tool the role may not call, as invalid without a call.
func TestTimeoutAndInvalid(t *testing.T) {
	t.Parallel()
	r := start(t, `
hooks:
  - name: slow-and-wrong
    on: ["github.issues.opened"]
    actions:
      - type: mcp
        parameters:
          serverId: everything
          toolName: trigger-long-running-operation
          timeout: 1000
          parameterMappings: [{toolParam: duration, source: literal, value: 3}, {toolParam: steps, source: literal, value: 3}]
      - type: mcp
        parameters:
          serverId: everything
          toolName: get-sum
          parameterMappings: [{toolParam: a, source: template, value: "{{.actor}}"}, {toolParam: b, source: literal, value: 1}]
  - name: not-allowed
    on: ["github.issues.opened"]
    role: nobody
    actions:
      - type: mcp
        parameters: {serverId: everything, toolName: echo, parameterMappings: [{toolParam: message, source: literal, value: x}]}
`)
	r.publish(t, issueOpened(t))
	got := map[string]*hooks.Execution{}
	for range 3 {
		x := record(t, r.executed)
		got[fmt.Sprintf("%s/%d", x.Hook, x.Action)] = x
	}
	if x := got["slow-and-wrong/1"]; x == nil || x.Status != hooks.StatusTimeout || x.DurationMS < 1000 || x.DurationMS > 2900 {
		t.Errorf("long operation with timeout 1000: got %+v, want timeout after about 1s", x)
	}
	if x := got["slow-and-wrong/2"]; x == nil || x.Status != hooks.StatusInvalid || !strings.Contains(x.Error, `"Codertocat" is not a number`) {
		t.Errorf("get-sum with a text: got %+v, want invalid naming the value", x)
	}
	if x := got["not-allowed/1"]; x == nil || x.Status != hooks.StatusInvalid || !strings.Contains(x.Error, `role "nobody"`) {
		t.Errorf("role without the capability: got %+v, want invalid naming the role", x)
	}
	// Only the long operation was called.
	testenv.Receive(t, r.calls, 30*time.Second, "tool.call")
	testenv.Quiet(t, r.calls, 300*time.Millisecond, "a call for an invalid action")
}

// TestStopSwitchAndDisabledServerSkip: with the stop switch on, and with
// the server disabled by an operator (`relay mcp disable`), actions are
// skipped with the reason and nothing is called.
func TestStopSwitchAndDisabledServerSkip(t *testing.T) {
	t.Parallel()
	r := start(t, `
hooks:
  - name: echo
    on: ["github.issues.opened"]
    actions:
      - type: mcp
        parameters: {serverId: everything, toolName: echo, parameterMappings: [{toolParam: message, source: context, value: url}]}
`)
	st, err := toolrunner.OpenState(t.Context(), r.b)
	if err != nil {
		t.Fatal(err)
	}
	status := func() *tools.StatusResponse {
		s, err := tools.StatusRemote(t.Context(), r.b.Conn(), r.b.Prefix())
		if err != nil {
			return &tools.StatusResponse{}
		}
		return s
	}
	if err := st.SetStop(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the stop switch on", func() bool { return status().Stopped })
	r.publish(t, issueOpened(t))
	if x := record(t, r.executed); x.Status != hooks.StatusSkipped || !strings.Contains(x.Error, "stop switch") {
		t.Errorf("stop switch: got %+v, want skipped naming the stop switch", x)
	}

	if err := st.SetStop(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if err := st.SetServer(t.Context(), "everything", tools.ServerState{Disabled: true, Reason: "maintenance", By: "operator", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "everything disabled", func() bool {
		s := status()
		return !s.Stopped && len(s.Servers) > 0 && s.Servers[0].State == "disabled"
	})
	r.publish(t, issueOpened(t))
	if x := record(t, r.executed); x.Status != hooks.StatusSkipped || !strings.Contains(x.Error, "disabled") || !strings.Contains(x.Error, "maintenance") {
		t.Errorf("disabled server: got %+v, want skipped naming disabled and the reason", x)
	}
	testenv.Quiet(t, r.calls, 300*time.Millisecond, "a tool call while skipped")
}

const incidentFile = `
hooks:
  - name: incident-work-package
    on: ["github.issues.labeled"]
    if: '"incident" in labels && state == "open"'
    actions:
      - type: mcp
        parameters:
          serverId: everything
          toolName: echo
          parameterMappings:
            - {toolParam: message, source: template, value: "{{.repository}}#{{.number}} {{.title}} [{{range $i, $l := .labels}}{{if $i}},{{end}}{{$l}}{{end}}]"}
  - name: never-on-other-labels
    on: ["github.issues.labeled"]
    if: '"wontfix" in labels'
    actions:
      - type: mcp
        parameters: {serverId: everything, toolName: echo, parameterMappings: [{toolParam: message, source: literal, value: x}]}
`

// TestHookOnLabelledIssue: the real issues.labeled example, labelled
// "incident" as well, fires the hook whose condition reads the labels from
// meta.facts; the unchanged example (label "bug" only) fires nothing.
func TestHookOnLabelledIssue(t *testing.T) {
	t.Parallel()
	r := start(t, incidentFile)
	r.publish(t, octokitItem(t, "issues", "labeled", nil))
	testenv.Quiet(t, r.executed, 500*time.Millisecond, "record for an issue without the incident label")

	it := octokitItem(t, "issues", "labeled", func(p map[string]any) {
		issue := p["issue"].(map[string]any)
		incident := map[string]any{"id": 1, "name": "incident", "color": "ff0000"}
		issue["labels"] = append(issue["labels"].([]any), incident)
		p["label"] = incident
	})
	r.publish(t, it)
	x := record(t, r.executed)
	want := "Codertocat/Hello-World#1 Spelling error in the README file [bug,incident]"
	if x.Hook != "incident-work-package" || x.Status != hooks.StatusSuccess || x.Params["message"] != want {
		t.Fatalf("got %+v, want incident-work-package success with message %q", x, want)
	}
	testenv.Quiet(t, r.executed, 300*time.Millisecond, "record of the hook on another label")
}

// TestMCPRefreshDropsHookToolLists: `relay mcp refresh` (RefreshRemote)
// reaches the hooks worker too: the tool lists it cached to check and
// resolve actions are dropped along with the runner's.
func TestMCPRefreshDropsHookToolLists(t *testing.T) {
	t.Parallel()
	r := start(t, greetFile)
	r.publish(t, issueOpened(t))
	record(t, r.executed)
	record(t, r.executed) // both actions done: nothing lists tools any more
	if n := hooks.CachedRoles(r.svc); n != 1 {
		t.Fatalf("cached roles after a run: got %d, want 1", n)
	}
	names, err := tools.RefreshRemote(t.Context(), r.b.Conn(), r.b.Prefix(), "everything")
	if err != nil || len(names) != 1 || names[0] != "everything" {
		t.Fatalf("refresh: got %v, %v; want [everything]", names, err)
	}
	testenv.WaitFor(t, 10*time.Second, "the hooks' tool lists dropped", func() bool { return hooks.CachedRoles(r.svc) == 0 })
}

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

const slackEchoFile = `
hooks:
  - name: echo-slack-messages
    on: ["slack.message"]
    actions:
      - {type: mcp, parameters: {serverId: everything, toolName: echo, parameterMappings: [{toolParam: message, source: context, value: content}]}}
`

// slackItem maps a Slack Events API payload through the Slack mapper, as the
// gateway does.
func slackItem(t *testing.T, body []byte) mappers.Item {
	t.Helper()
	const key = "8f742231b10e8888abcd99yyyzzz85a5"
	ts := strconv.FormatInt(mapperstest.Received.Unix(), 10)
	h := http.Header{}
	h.Set(slack.HeaderTimestamp, ts)
	h.Set(slack.HeaderSignature, slack.SignatureHeader(key, ts, body))
	p := slack.New(slack.Config{Secret: secret.New(key), Now: func() time.Time { return mapperstest.Received }})
	return mapperstest.MapOne(t, p, &mappers.Request{Route: slack.RouteEvents, Header: h, Body: body, Received: mapperstest.Received})
}

// TestNoHookOnOwnSlackPost: the relay's own Slack posts (posted by the app
// the event is for) never fire hooks, which would otherwise answer their
// own replies for ever; another app's bot message fires them like any.
func TestNoHookOnOwnSlackPost(t *testing.T) {
	t.Parallel()
	r := start(t, slackEchoFile)
	own := testenv.ReadFile(t, filepath.Join("..", "..", "mappers", "slack", "testdata", "events", "message_from_app.json"))
	r.publish(t, slackItem(t, own))
	other := bytes.ReplaceAll(own, []byte(`"app_id": "A123ABC456"`), []byte(`"app_id": "A0OTHERAPP"`))
	other = bytes.ReplaceAll(other, []byte("Ev06ABCDE13"), []byte("Ev06ABCDE99"))
	it := slackItem(t, other)
	r.publish(t, it)
	x := record(t, r.executed)
	if x.EnvelopeID != it.Envelope.ID {
		t.Errorf("hook ran for envelope %s, want only the other app's message %s", x.EnvelopeID, it.Envelope.ID)
	}
	testenv.Quiet(t, r.executed, 500*time.Millisecond, "a hook execution for the relay's own post")
}
