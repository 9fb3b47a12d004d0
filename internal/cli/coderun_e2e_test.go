package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/toolstest"
)

// e2eOncall is a Slack user who holds a role (oncall) in the code-run tests'
// policy.
const e2eOncall = "U0ONCALL"

// e2eReviewer holds another role (reviewer) that grants the code-run tests'
// tools (e2eStranger holds none and is no approver).
const e2eReviewer = "U0REVIEWER"

// codeRunPolicy lets the agent and the members of oncall use everything.
const codeRunPolicy = `roles:
  - role: agent
    capabilities: ["everything.*"]
  - role: oncall
    capabilities: ["everything.*"]
    members:
      slack: [` + e2eOncall + `]
  - role: reviewer
    capabilities: ["everything.*"]
    members:
      slack: [` + e2eReviewer + `]
`

// mention posts a signed Events API app_mention by user in channel with
// text, as Slack does; it returns the message's ts (microseconds, so that
// mentions within one second are distinct messages).
func (s *stack) mention(user, channel, text string) string {
	s.t.Helper()
	now := time.Now()
	ts := fmt.Sprintf("%d.%06d", now.Unix(), now.Nanosecond()/1000)
	body, err := json.Marshal(map[string]any{
		"token": "verification-token-unused", "team_id": e2eTeam, "api_app_id": "A0APP01", "type": "event_callback",
		"event_id": "Ev" + strings.ReplaceAll(ts, ".", ""), "event_time": time.Now().Unix(), "authed_users": []string{"UBOT"},
		"event": map[string]any{"type": "app_mention", "user": user, "text": text, "ts": ts, "team": e2eTeam,
			"channel": channel, "event_ts": ts},
	})
	must(s.t, err)
	s.postSlack(slack.RouteEvents, "application/json", body)
	return ts
}

// postSlack posts body to /webhooks/slack/<route>, signed with the stack's
// signing secret, and wants 200.
func (s *stack) postSlack(route, contentType string, body []byte) {
	s.t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, _ := http.NewRequest(http.MethodPost, s.base+"/webhooks/slack/"+route, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set(slack.HeaderTimestamp, ts)
	req.Header.Set(slack.HeaderSignature, slack.SignatureHeader(cmp.Or(s.slackSecret, e2eSlackSec), ts, body))
	resp, err := http.DefaultClient.Do(req)
	must(s.t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("POST /webhooks/slack/%s answered %d, want 200", route, resp.StatusCode)
	}
}

// runningPost waits for the message in channel's thread thread that shows a
// run of tool with its Cancel button.
func (s *stack) runningPost(channel, thread, tool string) fakes.SlackCall {
	s.t.Helper()
	return s.slackCall("the running message of "+tool, func(c fakes.SlackCall) bool {
		return c.Method == "chat.postMessage" && c.Params["channel"] == channel && c.Params["thread_ts"] == thread &&
			strings.Contains(c.Params["text"], "Running `"+tool+"`")
	}, "chat.postMessage")
}

// slackCall waits up to 60 s for a call of one of methods to the fake Slack
// that match accepts, and returns it.
func (s *stack) slackCall(what string, match func(fakes.SlackCall) bool, methods ...string) fakes.SlackCall {
	s.t.Helper()
	var found fakes.SlackCall
	testenv.WaitFor(s.t, 60*time.Second, what, func() bool {
		for _, m := range methods {
			for _, c := range s.slack.Calls(m) {
				if match(c) {
					found = c
					return true
				}
			}
		}
		return false
	})
	return found
}

// startCodeRunStack starts the end-to-end stack under codeRunPolicy,
// auditing tool calls to the file it returns.
func startCodeRunStack(t *testing.T) (s *stack, audit string) {
	t.Helper()
	audit = filepath.Join(t.TempDir(), "tools.jsonl")
	s = startStack(t, func(env map[string]string) {
		pol := filepath.Join(t.TempDir(), "policy.yaml")
		must(t, os.WriteFile(pol, []byte(codeRunPolicy), 0o600))
		env["RELAY_POLICY"] = pol
		env["RELAY_AUDIT_LOG"] = audit
	})
	return s, audit
}

// TestCodeRunCancelFromSlack drives a code-block run and its Cancel button as
// a Slack user does, through `relay serve`: an app mention runs
// server-everything's long-running operation, the running message shows a
// Cancel button, the click goes to the real tool runner (rpc.tool.cancel),
// which cancels the MCP call; the audit names the clicker and the running
// message is replaced, once, by the cancelled outcome.
func TestCodeRunCancelFromSlack(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "end-to-end")
	s, audit := startCodeRunStack(t)
	const (
		tool     = "everything.trigger-long-running-operation"
		duration = 300 // seconds the operation would take
	)
	ts := s.mention(e2eOncall, e2eChannel, fmt.Sprintf("<@UBOT> please\n```everything\ntool: trigger-long-running-operation\nduration: %d\nsteps: %d\n```", duration, duration))
	running := s.runningPost(e2eChannel, ts, tool)
	cancel := action(t, running, "relay_run_cancel")
	testenv.WaitFor(t, 30*time.Second, "the run to be active in the tool runner", func() bool {
		active, err := tools.ActiveRemote(t.Context(), s.nc, "relay")
		return err == nil && len(active) == 1 && active[0].ID == cancel.Value
	})
	s.click(e2eApprover, running, "relay_run_cancel")

	s.updatedTo(running, "was cancelled by <@"+e2eApprover+">")
	testenv.WaitFor(t, 20*time.Second, "the clicker to be told", func() bool {
		for _, c := range s.slack.Calls("chat.postEphemeral") {
			if c.Params["user"] == e2eApprover && strings.Contains(c.Params["text"], "Cancelling the run") {
				return true
			}
		}
		return false
	})
	var rec tools.Record
	testenv.WaitFor(t, 30*time.Second, "the audit record of the run", func() bool {
		recs := toolstest.AuditRecords(t, audit)
		if len(recs) == 0 {
			return false
		}
		if len(recs) > 1 {
			t.Fatalf("audit: %d records, want 1: %+v", len(recs), recs)
		}
		rec = recs[0]
		return true
	})
	if rec.Status != tools.StatusCancelled || rec.CancelledBy != "slack:"+e2eApprover || rec.ExecutionID != cancel.Value ||
		rec.Actor != "slack:"+e2eOncall || rec.AgentID != "slack:"+e2eOncall || rec.Role != "oncall" || rec.Tool != "trigger-long-running-operation" {
		t.Errorf("audit: got %+v, want the run of %s by slack:%s (role oncall) cancelled by slack:%s", rec, tool, e2eOncall, e2eApprover)
	}
	// The call ended on the cancel, not when the operation would have.
	if rec.DurationMS >= duration*1000 {
		t.Errorf("audit: the call took %.0f ms, want it ended by the cancel before the operation's %d s", rec.DurationMS, duration)
	}
	if active, err := tools.ActiveRemote(t.Context(), s.nc, "relay"); err != nil || len(active) != 0 {
		t.Errorf("active executions after the cancel: %+v (%v), want none", active, err)
	}
	s.exactlyOneOutcome(running)
}

// TestCodeRunCancelOnlyByAllowed clicks a running code block's Cancel
// button as people who may not and who may cancel it: a stranger (no role,
// no approver) is told so and the run completes; the run's author and a
// user whose role grants the tool cancel it, and the audit names them. The
// approver's cancel is TestCodeRunCancelFromSlack.
func TestCodeRunCancelOnlyByAllowed(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "end-to-end")
	s, audit := startCodeRunStack(t)
	const tool = "everything.trigger-long-running-operation"
	// start runs the operation for duration seconds as e2eOncall and waits
	// until it is active; it returns the running message and execution id.
	start := func(duration int) (fakes.SlackCall, string) {
		t.Helper()
		ts := s.mention(e2eOncall, e2eChannel, fmt.Sprintf("<@UBOT> please\n```everything\ntool: trigger-long-running-operation\nduration: %d\nsteps: %d\n```", duration, duration))
		running := s.runningPost(e2eChannel, ts, tool)
		id := action(t, running, "relay_run_cancel").Value
		testenv.WaitFor(t, 30*time.Second, "the run to be active in the tool runner", func() bool {
			active, err := tools.ActiveRemote(t.Context(), s.nc, "relay")
			return err == nil && slices.ContainsFunc(active, func(e tools.Execution) bool { return e.ID == id })
		})
		return running, id
	}
	told := func(user, text string) {
		t.Helper()
		testenv.WaitFor(t, 20*time.Second, user+" to be told "+text, func() bool {
			for _, c := range s.slack.Calls("chat.postEphemeral") {
				if c.Params["user"] == user && strings.Contains(c.Params["text"], text) {
					return true
				}
			}
			return false
		})
	}
	record := func(id string) tools.Record {
		t.Helper()
		var rec tools.Record
		testenv.WaitFor(t, 60*time.Second, "the audit record of "+id, func() bool {
			for _, r := range toolstest.AuditRecords(t, audit) {
				if r.ExecutionID == id {
					rec = r
					return true
				}
			}
			return false
		})
		return rec
	}

	// A stranger is refused while the run is active; it runs to its end.
	running, id := start(8)
	s.click(e2eStranger, running, "relay_run_cancel")
	told(e2eStranger, "You may not cancel this run")
	if active, err := tools.ActiveRemote(t.Context(), s.nc, "relay"); err != nil || !slices.ContainsFunc(active, func(e tools.Execution) bool { return e.ID == id }) {
		t.Errorf("after the stranger's click: active %+v (%v), want the run still active", active, err)
	}
	if rec := record(id); rec.Status != tools.StatusSuccess || rec.CancelledBy != "" {
		t.Errorf("audit of the stranger's run: status %q cancelled_by %q, want success and nobody", rec.Status, rec.CancelledBy)
	}

	// The author and a role that grants the tool cancel.
	for _, who := range []string{e2eOncall, e2eReviewer} {
		running, id := start(300)
		s.click(who, running, "relay_run_cancel")
		s.updatedTo(running, "was cancelled by <@"+who+">")
		told(who, "Cancelling the run")
		if rec := record(id); rec.Status != tools.StatusCancelled || rec.CancelledBy != "slack:"+who || rec.Actor != "slack:"+e2eOncall {
			t.Errorf("audit: got %+v, want the run of slack:%s cancelled by slack:%s", rec, e2eOncall, who)
		}
	}
}

// exactlyOneOutcome makes sure the run's outcome was shown once: one update
// of the running message and no result posted beside it.
func (s *stack) exactlyOneOutcome(running fakes.SlackCall) {
	s.t.Helper()
	time.Sleep(time.Second) // a duplicate would land now
	var updates, posts []map[string]string
	for _, c := range s.slack.Calls("chat.update") {
		if c.Params["ts"] == running.Params["_ts"] {
			updates = append(updates, c.Params)
		}
	}
	for _, c := range s.slack.Calls("chat.postMessage") {
		if c.Params["thread_ts"] == running.Params["thread_ts"] && c.Params["_ts"] != running.Params["_ts"] {
			posts = append(posts, c.Params)
		}
	}
	if len(updates) != 1 || len(posts) != 0 {
		s.t.Errorf("outcome: %d updates of the running message %+v and %d other thread messages %+v, want exactly one update", len(updates), updates, len(posts), posts)
	}
}
