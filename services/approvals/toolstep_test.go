package approvals_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/rpc/approvalrpc"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/approvals"
	"github.com/relaystation/relay/tools"
)

// slackThread7 is a task's Slack origin thread.
const slackThread7 = "slack:" + team + "/C0SLACK07/1700000000.000100"

// toolStep publishes an agent's tool step of task (a new one when "") on
// the given thread, with target when not nil, and returns it.
func (h *harness) toolStep(task, thread string, target *envelope.Target) *envelope.Envelope {
	h.t.Helper()
	if task == "" {
		task = uuid.NewString()
	}
	e := envelope.New(envelope.ChannelSlack, envelope.RoleAssistant, "call hosted.whoami")
	e.Meta.TaskID, e.Meta.Thread = task, thread
	e.Meta.Set("agent", map[string]any{"id": "agent-test", "role": "agent"})
	if target != nil {
		e.Meta.SetTarget(target)
	}
	e.ToolCall = &envelope.ToolCall{ID: "s1-" + uuid.NewString()[:4], Name: "hosted.whoami",
		Args: map[string]any{"repo": "acme/widgets", "token": "ghp_" + strings.Repeat("a", 36)}}
	h.publish(approvals.SubjectToolStep, e)
	return e
}

// TestToolStepApprovedOnce: an agent's call of a per-user server is put up
// in the task's own Slack thread, naming the tool, the server and the
// arguments (a token in them redacted) and saying it runs with the
// approver's account. A non-approver's click is refused and publishes
// nothing; the approver's double click publishes the call on tool.call
// once, acting for the approver (meta approved_by, approved_in) with the
// envelope id the agent gave it.
func TestToolStepApprovedOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	step := h.toolStep("", slackThread7, nil)
	post := h.posted(1)
	key := approvals.StepKey(step.Meta.TaskID, step.ToolCall.ID)
	if post.Params["channel"] != "C0SLACK07" || post.Params["thread_ts"] != "1700000000.000100" {
		t.Errorf("posted in %s thread %q, want the task's thread", post.Params["channel"], post.Params["thread_ts"])
	}
	blocks := post.Params["blocks"]
	for _, want := range []string{"hosted.whoami", "*hosted*", "acme/widgets", "approver's own account", tools.Redacted} {
		if !strings.Contains(blocks, want) {
			t.Errorf("the message lacks %q: %s", want, blocks)
		}
	}
	if strings.Contains(blocks, "ghp_aaaa") {
		t.Errorf("the message shows the token: %s", blocks)
	}
	if b := buttons(t, post); len(b) != 2 || b[approvals.ActionApprove] != key || b[approvals.ActionReject] != key {
		t.Errorf("got buttons %v, want Approve and Reject of %s", b, key)
	}
	ts := post.Params["_ts"]

	h.interact(click("U0STRANGER", approvals.ActionApprove, key, ts))
	h.drained()
	if n := len(h.streamMsgs(envelope.SubjectToolCall)); n != 0 {
		t.Fatalf("a non-approver's click published %d calls", n)
	}
	if eph := h.slack.Calls("chat.postEphemeral"); len(eph) != 1 || eph[0].Params["user"] != "U0STRANGER" {
		t.Errorf("got ephemerals %v, want one refusal for the stranger", eph)
	}

	h.interact(click(approver, approvals.ActionApprove, key, ts))
	h.interact(click(approver, approvals.ActionApprove, key, ts))
	h.drained()
	calls := h.streamMsgs(envelope.SubjectToolCall)
	if len(calls) != 1 {
		t.Fatalf("got %d calls on tool.call, want 1", len(calls))
	}
	c := calls[0]
	if c.ID != step.ID || c.ToolCall.ID != step.ToolCall.ID || c.Meta.TaskID != step.Meta.TaskID || c.Meta.Thread != slackThread7 {
		t.Errorf("got call %s %+v of task %s, want the step's", c.ID, c.ToolCall, c.Meta.TaskID)
	}
	if got := c.Meta.GetString(tools.MetaApprovedBy); got != approver {
		t.Errorf("got approved_by %q, want %s", got, approver)
	}
	if got := c.Meta.GetString(tools.MetaApprovedIn); got != "slack:/C0SLACK07/1700000000.000100" {
		t.Errorf("got approved_in %q, want the thread", got)
	}
	if c.ToolCall.Args["token"] != step.ToolCall.Args["token"] {
		t.Errorf("the call's arguments changed: %v", c.ToolCall.Args)
	}
	testenv.WaitFor(t, 10*time.Second, "the message updated to approved", func() bool {
		for _, u := range h.slack.Calls("chat.update") {
			if u.Params["ts"] == ts && strings.Contains(u.Params["blocks"], "Approved") && strings.Contains(u.Params["blocks"], "own account") {
				return true
			}
		}
		return false
	})
	if n := len(h.streamMsgs(envelope.SubjectToolFailed)); n != 0 {
		t.Errorf("got %d tool.failed after an approval", n)
	}
}

// TestToolStepRejected: a rejection answers the call with a tool.failed
// naming who rejected it and why; the call is never published.
func TestToolStepRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	step := h.toolStep("", slackThread7, nil)
	key := approvals.StepKey(step.Meta.TaskID, step.ToolCall.ID)
	h.interact(click(approver, approvals.ActionReject, key, h.messageTS(1)))
	view, _ := openedView(t, h, 1)
	if !strings.Contains(mustJSON(t, view["blocks"]), "will not be run") {
		t.Errorf("the reject modal does not say the call will not run: %s", mustJSON(t, view["blocks"]))
	}
	h.interact(submit(approver, approvals.ViewReject, view["private_metadata"].(string), map[string]any{
		"reason": map[string]any{"reason": textInput("not on prod")},
	}))
	testenv.WaitFor(t, 10*time.Second, "tool.failed", func() bool { return len(h.streamMsgs(envelope.SubjectToolFailed)) == 1 })
	f := h.streamMsgs(envelope.SubjectToolFailed)[0]
	errText, _ := f.ToolCall.Result["error"].(string)
	if f.ToolCall.ID != step.ToolCall.ID || f.Meta.TaskID != step.Meta.TaskID || !strings.Contains(errText, "rejected by <@"+approver+">") ||
		!strings.Contains(errText, "not on prod") {
		t.Errorf("got tool.failed %+v of task %s, want the rejection by the approver with the reason", f.ToolCall, f.Meta.TaskID)
	}
	h.drained()
	if n := len(h.streamMsgs(envelope.SubjectToolCall)); n != 0 {
		t.Errorf("a rejected step published %d calls", n)
	}
}

// TestToolStepExpires: a step nobody decides expires; the model is told.
func TestToolStepExpires(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	step := h.toolStep("", slackThread7, nil)
	h.posted(1)
	h.drained()
	h.offset.Store(int64(48 * time.Hour))
	if n, err := h.svc.Sweep(t.Context()); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 expired", n, err)
	}
	testenv.WaitFor(t, 10*time.Second, "tool.failed", func() bool { return len(h.streamMsgs(envelope.SubjectToolFailed)) == 1 })
	f := h.streamMsgs(envelope.SubjectToolFailed)[0]
	if e, _ := f.ToolCall.Result["error"].(string); f.ToolCall.ID != step.ToolCall.ID || !strings.Contains(e, "expired") {
		t.Errorf("got %+v, want the expiry", f.ToolCall)
	}
}

// TestToolStepOfGitHubTask: a task from GitHub is asked about in the
// approval channel; its later steps and its answer follow in that thread.
func TestToolStepOfGitHubTask(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := h.toolStep("", "github:acme/widgets#7", &github7)
	p1 := h.posted(1)
	if p1.Params["channel"] != approvalCh || p1.Params["thread_ts"] != "" {
		t.Fatalf("posted in %s thread %q, want a new message in the approval channel", p1.Params["channel"], p1.Params["thread_ts"])
	}
	h.drained()
	h.toolStep(first.Meta.TaskID, "github:acme/widgets#7", &github7)
	if p2 := h.posted(2); p2.Params["channel"] != approvalCh || p2.Params["thread_ts"] != p1.Params["_ts"] {
		t.Errorf("second step posted in %s thread %q, want the first's thread %s", p2.Params["channel"], p2.Params["thread_ts"], p1.Params["_ts"])
	}
	h.drained()
	sugg := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, "The answer.")
	sugg.Meta.TaskID, sugg.Meta.Thread = first.Meta.TaskID, "github:acme/widgets#7"
	sugg.Meta.SetTarget(&github7)
	h.publish(approvals.SubjectSuggestion, sugg)
	if p3 := h.posted(3); p3.Params["thread_ts"] != p1.Params["_ts"] {
		t.Errorf("the answer posted in thread %q, want the steps' thread %s", p3.Params["thread_ts"], p1.Params["_ts"])
	}
}

// TestToolStepNowhereToAsk: a step of a task with no Slack thread and no
// target is answered with a tool.failed at once, and nothing is posted.
func TestToolStepNowhereToAsk(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	step := h.toolStep("", "internal:cron", nil)
	testenv.WaitFor(t, 10*time.Second, "tool.failed", func() bool { return len(h.streamMsgs(envelope.SubjectToolFailed)) == 1 })
	f := h.streamMsgs(envelope.SubjectToolFailed)[0]
	if e, _ := f.ToolCall.Result["error"].(string); f.ToolCall.ID != step.ToolCall.ID || !strings.Contains(e, "no Slack thread") {
		t.Errorf("got %+v, want the refusal", f.ToolCall)
	}
	if n := len(h.slack.Calls("chat.postMessage")); n != 0 {
		t.Errorf("posted %d messages, want none", n)
	}
}

// TestToolStepFromTheConsole: the console may reject a tool step, never
// approve it (an operator is no Slack person with a connection).
func TestToolStepFromTheConsole(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	step := h.toolStep("", slackThread7, nil)
	key := approvals.StepKey(step.Meta.TaskID, step.ToolCall.ID)
	h.posted(1)
	_, err := approvalrpc.Decide(t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.DecideRequest{TaskID: key, Action: approvalrpc.ActionApprove, By: "alice"})
	if err == nil || !strings.Contains(err.Error(), "approve it in Slack") {
		t.Fatalf("console approve = %v, want it refused", err)
	}
	if r := h.decide(approvalrpc.DecideRequest{TaskID: key, Action: approvalrpc.ActionReject, By: "bob", Reason: "no"}); !r.Won {
		t.Fatalf("console reject: %+v, want it won", r)
	}
	testenv.WaitFor(t, 10*time.Second, "tool.failed", func() bool { return len(h.streamMsgs(envelope.SubjectToolFailed)) == 1 })
	if e, _ := h.streamMsgs(envelope.SubjectToolFailed)[0].ToolCall.Result["error"].(string); !strings.Contains(e, "rejected by console operator bob") {
		t.Errorf("got error %q, want the operator named", e)
	}
	if n := len(h.streamMsgs(envelope.SubjectToolCall)); n != 0 {
		t.Errorf("got %d calls, want none", n)
	}
}
