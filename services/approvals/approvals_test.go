package approvals_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/approvals"
)

// blocksOf decodes the blocks parameter of a chat call.
func blocksOf(t testing.TB, c fakes.SlackCall) []map[string]any {
	t.Helper()
	var b []map[string]any
	if err := json.Unmarshal([]byte(c.Params["blocks"]), &b); err != nil {
		t.Fatalf("%s blocks: %v (%q)", c.Method, err, c.Params["blocks"])
	}
	return b
}

// blockText is every text in the blocks of a chat call, decoded, one per line.
func blockText(t testing.TB, c fakes.SlackCall) string {
	t.Helper()
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && k == "text" {
					out = append(out, s)
				} else {
					walk(e)
				}
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	for _, b := range blocksOf(t, c) {
		walk(b)
	}
	return strings.Join(out, "\n")
}

// buttons returns action_id -> value of the message's buttons.
func buttons(t testing.TB, c fakes.SlackCall) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, b := range blocksOf(t, c) {
		if b["type"] != "actions" {
			continue
		}
		for _, el := range b["elements"].([]any) {
			m := el.(map[string]any)
			out[m["action_id"].(string)], _ = m["value"].(string)
		}
	}
	return out
}

func TestPostsSuggestionWithButtons(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	task, _ := h.suggestion(github7, "Try `relay serve` <!channel> & restart.")
	c := h.posted(1)
	if got := c.Params["channel"]; got != approvalCh {
		t.Errorf("posted to %q, want %q", got, approvalCh)
	}
	want := map[string]string{approvals.ActionApprove: task, approvals.ActionEdit: task, approvals.ActionReject: task}
	if got := buttons(t, c); len(got) != 3 || got[approvals.ActionApprove] != task || got[approvals.ActionEdit] != task || got[approvals.ActionReject] != task {
		t.Errorf("buttons = %v, want %v", got, want)
	}
	all := blockText(t, c)
	for _, s := range []string{"GitHub acme/widgets#7", "https://github.com/acme/widgets/issues/7", "doc-404", "&lt;!channel&gt; &amp; restart"} {
		if !strings.Contains(all, s) {
			t.Errorf("message blocks do not show %q: %s", s, all)
		}
	}
	if strings.Contains(all, "<!channel>") {
		t.Errorf("message lets the answer mention @channel: %s", all)
	}

	// Per-target channel override, and a Slack target goes straight out.
	h.suggestion(envelope.Target{Channel: "sentry", Org: "acme", IssueID: "42"}, "Sentry answer")
	if got := h.posted(2).Params["channel"]; got != "C0SENTRY1" {
		t.Errorf("sentry suggestion posted to %q, want C0SENTRY1", got)
	}
	stask, _ := h.suggestion(envelope.Target{Channel: "slack", Team: team, SlackCh: "C0CHAT01", ThreadTS: "1.2"}, "Slack answer")
	testenv.WaitFor(t, 10*time.Second, "out.slack", func() bool { return len(h.streamMsgs("out.slack")) == 1 })
	out := h.streamMsgs("out.slack")[0]
	if out.Content != "Slack answer" || out.Meta.TaskID != stask || out.Meta.GetString(approvals.MetaIdempotencyKey) != "out:"+stask {
		t.Errorf("out.slack = content %q task %q key %q", out.Content, out.Meta.TaskID, out.Meta.GetString(approvals.MetaIdempotencyKey))
	}
	h.drained()
	if n := len(h.slack.Calls("chat.postMessage")); n != 2 {
		t.Errorf("chat.postMessage called %d times, want 2 (no approval for a Slack target)", n)
	}
}

func TestApproveExactlyOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	task, sugg, ts := h.firstApproval("The fix is in v1.2.")

	// A double click, a concurrent click by the same approver and a Slack retry
	// of the first click (same trigger id: the same delivery identity).
	first := click(approver, approvals.ActionApprove, task, ts)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { h.interact(click(approver, approvals.ActionApprove, task, ts)) })
	}
	wg.Wait()
	h.interact(first)
	h.interact(first)
	h.drained()

	outs := h.streamMsgs("out.github")
	if len(outs) != 1 {
		t.Fatalf("out.github has %d envelopes, want exactly 1", len(outs))
	}
	out := outs[0]
	if out.Content != "The fix is in v1.2." || out.Meta.TaskID != task || out.Meta.Thread != sugg.Meta.Thread {
		t.Errorf("out = %q task %q thread %q", out.Content, out.Meta.TaskID, out.Meta.Thread)
	}
	if got := out.Meta.GetString(approvals.MetaIdempotencyKey); got != "out:"+task {
		t.Errorf("idempotency_key = %q, want out:%s", got, task)
	}
	tgt, err := out.Meta.Target()
	if err != nil || tgt == nil || *tgt != github7 {
		t.Errorf("target = %+v, %v; want %+v", tgt, err, github7)
	}
	var ap map[string]any
	if _, err := out.Meta.Decode(approvals.MetaApproval, &ap); err != nil {
		t.Fatal(err)
	}
	if ap["id"] != task || ap["decided_by"] != approver || ap["slack_channel"] != approvalCh || ap["slack_ts"] != ts || ap["decided_at"] == "" {
		t.Errorf("meta.approval = %v", ap)
	}
	if out.Meta.Source == nil || out.Meta.Source.URL != sugg.Meta.Source.URL {
		t.Errorf("meta.source = %+v, want the suggestion's", out.Meta.Source)
	}

	// The message shows who decided and has no buttons left.
	ups := h.slack.Calls("chat.update")
	if len(ups) == 0 {
		t.Fatal("the message was not updated")
	}
	last := ups[len(ups)-1]
	if last.Params["ts"] != ts || len(buttons(t, last)) != 0 || !strings.Contains(blockText(t, last), "Approved") || !strings.Contains(blockText(t, last), "<@"+approver+">") {
		t.Errorf("last chat.update = %v", last.Params)
	}
	if n := len(h.streamMsgs(approvals.SubjectDecided)); n != 1 {
		t.Errorf("approval.decided has %d records, want 1", n)
	}

	// A redelivery after a crash (the handler runs again on the same click) and
	// a restart of the worker change nothing.
	h.stop()
	h.start()
	if n := h.approveDrained(task, ts); n != 1 {
		t.Errorf("after redelivery and restart out.github has %d envelopes, want 1", n)
	}
}

// openedView waits for the n-th views.open and returns its view.
func openedView(t testing.TB, h *harness, n int) (view map[string]any, trigger string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, "views.open", func() bool { return len(h.slack.Calls("views.open")) >= n })
	c := h.slack.Calls("views.open")[n-1]
	if err := json.Unmarshal([]byte(c.Params["view"]), &view); err != nil {
		t.Fatalf("view: %v", err)
	}
	return view, c.Params["trigger_id"]
}

func TestEditThenApprove(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	task, _, ts := h.firstApproval("Draft answer.")
	ce := h.interact(click(approver, approvals.ActionEdit, task, ts))
	view, trigger := openedView(t, h, 1)
	var meta struct {
		TriggerID string `json:"trigger_id"`
	}
	if _, err := ce.Meta.Decode("slack", &meta); err != nil || trigger == "" || trigger != meta.TriggerID {
		t.Errorf("views.open trigger_id = %q, want the click's %q (%v)", trigger, meta.TriggerID, err)
	}
	if view["callback_id"] != approvals.ViewEdit {
		t.Errorf("callback_id = %v, want %s", view["callback_id"], approvals.ViewEdit)
	}
	if !strings.Contains(mustJSON(t, view["blocks"]), `"initial_value":"Draft answer."`) {
		t.Errorf("edit modal is not pre-filled: %s", mustJSON(t, view["blocks"]))
	}
	md, _ := view["private_metadata"].(string)
	sub := h.interact(submit(approver, approvals.ViewEdit, md, map[string]any{
		"text_0": map[string]any{"text": textInput("Edited answer: upgrade to v1.2.")},
	}))
	if sub.Meta.TaskID != task {
		t.Errorf("the mapper read task %q from private_metadata, want %q", sub.Meta.TaskID, task)
	}
	testenv.WaitFor(t, 10*time.Second, "chat.update with the edited text", func() bool {
		for _, c := range h.slack.Calls("chat.update") {
			if strings.Contains(c.Params["blocks"], "Edited answer: upgrade to v1.2.") && len(buttons(t, c)) == 3 {
				return true
			}
		}
		return false
	})
	h.approveUntil(task, ts, 1, "out.github")
	if got := h.streamMsgs("out.github")[0].Content; got != "Edited answer: upgrade to v1.2." {
		t.Errorf("approved text = %q, want the edited text", got)
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRejectWithReason(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	task, _, ts := h.firstApproval("Wrong answer.")
	h.interact(click(approver, approvals.ActionReject, task, ts))
	view, _ := openedView(t, h, 1)
	if view["callback_id"] != approvals.ViewReject {
		t.Fatalf("callback_id = %v, want %s", view["callback_id"], approvals.ViewReject)
	}
	h.interact(submit(approver, approvals.ViewReject, view["private_metadata"].(string), map[string]any{
		"reason": map[string]any{"reason": textInput("cites the wrong release")},
	}))
	testenv.WaitFor(t, 10*time.Second, "approval.decided", func() bool { return len(h.streamMsgs(approvals.SubjectDecided)) == 1 })
	d := h.streamMsgs(approvals.SubjectDecided)[0]
	var ap map[string]any
	_, _ = d.Meta.Decode(approvals.MetaApproval, &ap)
	if ap["status"] != "rejected" || ap["reason"] != "cites the wrong release" || ap["decided_by"] != approver {
		t.Errorf("decision = %v", ap)
	}
	ups := h.slack.Calls("chat.update")
	last := ups[len(ups)-1]
	if !strings.Contains(last.Params["blocks"], "Rejected") || !strings.Contains(last.Params["blocks"], "cites the wrong release") || len(buttons(t, last)) != 0 {
		t.Errorf("message after reject: %s", last.Params["blocks"])
	}
	// An approval click after the rejection posts nothing.
	if n := h.approveDrained(task, ts); n != 0 {
		t.Errorf("out.github has %d envelopes after a rejection, want 0", n)
	}
}

func TestNonApproverRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	task, _, ts := h.firstApproval("Answer.")
	for _, action := range []string{approvals.ActionApprove, approvals.ActionEdit, approvals.ActionReject} {
		h.interact(click("U0INTRUDER", action, task, ts))
	}
	h.drained()
	eph := h.slack.Calls("chat.postEphemeral")
	if len(eph) != 3 {
		t.Fatalf("chat.postEphemeral called %d times, want 3", len(eph))
	}
	for _, c := range eph {
		if c.Params["user"] != "U0INTRUDER" || c.Params["channel"] != approvalCh || !strings.Contains(c.Params["text"], "only approvers") {
			t.Errorf("ephemeral = %v", c.Params)
		}
	}
	audits := h.streamMsgs(approvals.SubjectAudit)
	refused := 0
	for _, a := range audits {
		var rec map[string]any
		_, _ = a.Meta.Decode(approvals.MetaAudit, &rec)
		if rec["allowed"] == false && rec["user"] == "U0INTRUDER" && rec["task_id"] == task {
			refused++
		}
	}
	if refused != 3 {
		t.Errorf("%d refusal audit records, want 3 (of %d)", refused, len(audits))
	}
	if n := len(h.streamMsgs("out.github")); n != 0 {
		t.Errorf("out.github has %d envelopes, want 0", n)
	}
	if n := len(h.slack.Calls("views.open")); n != 0 {
		t.Errorf("views.open called %d times for a non-approver", n)
	}
	if n := len(h.slack.Calls("chat.update")); n != 0 {
		t.Errorf("chat.update called %d times for a non-approver", n)
	}
}

func TestUserGroupApprover(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *approvals.Config) { c.Approvers = []string{"S0LEADS01", "S0GONE01"} })
	h.slack.SetGroup("S0LEADS01", "U0LEAD01", "U0LEAD02")
	task, _, ts := h.firstApproval("Group-approved answer.")
	h.interact(click("U0NOBODY", approvals.ActionApprove, task, ts))
	h.drained()
	if n := len(h.streamMsgs("out.github")); n != 0 {
		t.Fatalf("a non-member's click published %d envelopes", n)
	}
	h.interact(click("U0LEAD02", approvals.ActionApprove, task, ts))
	testenv.WaitFor(t, 10*time.Second, "out.github", func() bool { return len(h.streamMsgs("out.github")) == 1 })
	h.drained()
	var lists int
	for _, c := range h.slack.Calls("usergroups.users.list") {
		if c.Params["usergroup"] == "S0LEADS01" {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("usergroups.users.list for S0LEADS01 called %d times, want 1 (cached)", lists)
	}
}

func TestExpiryFailsClosed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	task, _, ts := h.firstApproval("Late answer.")
	h.drained()
	h.offset.Store(int64(25 * time.Hour))
	if n := h.approveDrained(task, ts); n != 0 {
		t.Errorf("an expired approval published %d envelopes", n)
	}
	ups := h.slack.Calls("chat.update")
	if len(ups) == 0 || !strings.Contains(ups[len(ups)-1].Params["blocks"], "Expired") || len(buttons(t, ups[len(ups)-1])) != 0 {
		t.Errorf("message not marked expired: %v", ups)
	}
	eph := h.slack.Calls("chat.postEphemeral")
	if len(eph) != 1 || !strings.Contains(eph[0].Params["text"], "expired") {
		t.Errorf("ephemeral = %v, want one saying expired", eph)
	}

	// The sweep expires a suggestion nobody clicked.
	h.offset.Store(0)
	task2, _ := h.suggestion(github7, "Forgotten answer.")
	h.messageTS(2)
	h.drained()
	h.offset.Store(int64(25 * time.Hour))
	n, err := h.svc.Sweep(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 expired", n, err)
	}
	ups = h.slack.Calls("chat.update")
	if last := ups[len(ups)-1]; last.Params["ts"] != h.messageTS(2) || !strings.Contains(last.Params["blocks"], "Expired") {
		t.Errorf("sweep did not update the message: %v", last.Params)
	}
	if n := h.approveDrained(task2, h.messageTS(2)); n != 0 {
		t.Errorf("a swept approval published %d envelopes", n)
	}
}

func TestRestartKeepsPendingApprovals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := bustest.Embedded(t, bustest.WithDataDir(dir))
	h := &harness{t: t, bus: b, slack: fakes.NewSlack(t)}
	h.cfg = approvals.Config{BotToken: h.cfgToken(), APIURL: h.slack.URL(), Channel: approvalCh, Approvers: []string{approver}, SweepInterval: time.Hour}
	h.start()
	task, _, ts := h.firstApproval("Survives a restart.")
	h.drained()
	h.stop()
	b.Close()

	// The whole process goes away and comes back on the same data directory.
	h.bus = bustest.Embedded(t, bustest.WithDataDir(dir))
	h.start()
	h.approveUntil(task, ts, 1, "out.github after restart")
	if n := len(h.slack.Calls("chat.postMessage")); n != 1 {
		t.Errorf("chat.postMessage called %d times, want 1 (the suggestion was not re-posted)", n)
	}
}

func TestSecondSuggestionSameThread(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	task, first, ts := h.firstApproval("First draft.")
	// A newer draft of the pending task updates the message in place.
	second := first.Reply(envelope.ChannelInternal, envelope.RoleAssistant, "Second draft.")
	second.Meta.Source, second.Meta.Extra = first.Meta.Source, first.Meta.Extra
	h.publish(approvals.SubjectSuggestion, second)
	testenv.WaitFor(t, 10*time.Second, "update with the second draft", func() bool {
		for _, c := range h.slack.Calls("chat.update") {
			if c.Params["ts"] == ts && strings.Contains(c.Params["blocks"], "Second draft.") {
				return true
			}
		}
		return false
	})
	h.approveUntil(task, ts, 1, "out.github")
	h.drained()
	// After the decision, a new draft opens round 2 in the same thread.
	third := first.Reply(envelope.ChannelInternal, envelope.RoleAssistant, "Follow-up.")
	third.Meta.Source, third.Meta.Extra = first.Meta.Source, first.Meta.Extra
	h.publish(approvals.SubjectSuggestion, third)
	c := h.posted(2)
	if c.Params["thread_ts"] != ts {
		t.Errorf("round 2 posted with thread_ts %q, want %q", c.Params["thread_ts"], ts)
	}
	h.approveUntil(task, c.Params["_ts"], 2, "round 2 out.github")
	outs := h.streamMsgs("out.github")
	if outs[0].Content != "Second draft." || outs[1].Content != "Follow-up." {
		t.Errorf("outs = %q, %q", outs[0].Content, outs[1].Content)
	}
	if got := outs[1].Meta.GetString(approvals.MetaIdempotencyKey); got != "out:"+task+":2" {
		t.Errorf("round 2 idempotency key = %q", got)
	}
}

func TestInvalidSuggestionDeadLettered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	e := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, "no target")
	e.Meta.TaskID = "t-1"
	h.publish(approvals.SubjectSuggestion, e)
	testenv.WaitFor(t, 10*time.Second, "dead letter", func() bool {
		dls, err := h.bus.DeadLetters(context.Background(), 0)
		return err == nil && len(dls) == 1 && strings.Contains(dls[0].Reason, "meta.target")
	})
	if n := len(h.slack.Calls("chat.postMessage")); n != 0 {
		t.Errorf("posted %d messages for an invalid suggestion", n)
	}
}
