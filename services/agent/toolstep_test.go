package agent

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
)

// whoamiTool is a tool of a per-user server ("oauth": {"per": "user"}).
var whoamiTool = tools.ToolInfo{Name: "hosted.whoami", Server: "hosted", Tool: "whoami", Description: "the user of the token",
	InputSchema: map[string]any{"type": "object", "properties": map[string]any{"verbose": map[string]any{"type": "boolean"}}}, PerUser: true}

// TestPerUserCallWaitsForApproval: the model's call of a per-user server's
// tool is not put on tool.call; the same call envelope goes to
// agent.toolstep (with the task's target) and the task waits. The approvals
// worker's answer comes back as a result like any other: the approved call
// published on tool.call runs and the model gets its output; a rejection
// (a tool.failed) reaches the model as an error naming who rejected it.
func TestPerUserCallWaitsForApproval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		approve  bool
		wantTool string
	}{
		{"approved", true, "Echo: "},
		{"rejected", false, "error: the call of hosted.whoami was rejected by <@U0ALICE> in Slack; it was not run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, []reply{callTool("hosted__whoami", map[string]any{"verbose": true}), say("Done.")},
				withRunner(&fakeRunner{tools: []tools.ToolInfo{echoTool, whoamiTool}}))
			trigger := slackMention(false, false)
			h.publish(t, "in.slack.app_mention", trigger)
			step := h.next(t)
			if step.ToolCall == nil || step.ToolCall.Name != "hosted.whoami" || step.ToolCall.Args["verbose"] != true || step.Meta.TaskID != TaskID(trigger.ID) {
				t.Fatalf("got %+v on agent.>, want the tool step of hosted.whoami", step)
			}
			if target, err := step.Meta.Target(); err != nil || target == nil || target.SlackCh != "C0LAN2Q65" {
				t.Errorf("got step target %+v, %v; want the task's Slack thread", target, err)
			}
			// The step is published before the task records it so.
			var task *Task
			testenv.WaitFor(t, 10*time.Second, "the task to record its step published", func() bool {
				got, _, err := h.tasksGet(t, TaskID(trigger.ID))
				task = got
				return err == nil && got.CallsPublished
			})
			if task.Status != StatusWaiting || len(task.Calls) != 1 || !task.Calls[0].Approval || task.Calls[0].Done {
				t.Fatalf("got task %s with calls %+v, want it waiting for the approval", task.Status, task.Calls)
			}
			for _, ft := range h.llm.requests()[0].Tools {
				if per := strings.Contains(ft.Function.Description, perUserNote); per != (ft.Function.Name == "hosted__whoami") {
					t.Errorf("got description %q of %s, want the per-user note on hosted__whoami only", ft.Function.Description, ft.Function.Name)
				}
			}
			if n := len(h.runner.received()); n != 0 {
				t.Fatalf("the tool runner got %d calls before an approval, want none", n)
			}
			if tc.approve {
				call := *step
				call.Meta.Extra = nil
				call.Meta.Set(tools.MetaApprovedBy, "U0ALICE")
				if _, err := h.b.Publish(t.Context(), envelope.SubjectToolCall, &call, bus.WithMsgID("approve:test")); err != nil {
					t.Fatal(err)
				}
			} else {
				text := "the call of hosted.whoami was rejected by <@U0ALICE> in Slack; it was not run"
				out := step.Reply(step.Channel, envelope.RoleTool, text)
				out.ToolCall = &envelope.ToolCall{ID: step.ToolCall.ID, Name: step.ToolCall.Name, Result: map[string]any{"status": "error", "error": text}}
				h.publish(t, envelope.SubjectToolFailed, out)
			}
			if s := h.next(t); s.Role != envelope.RoleAssistant || s.Content != "Done." {
				t.Fatalf("got %s %q, want the suggestion", s.Role, s.Content)
			}
			if got := h.llm.requests()[1].LastTool(); !strings.HasPrefix(got, tc.wantTool) {
				t.Errorf("got tool output %q, want %q", got, tc.wantTool)
			}
			calls := h.runner.received()
			if tc.approve && (len(calls) != 1 || calls[0].Meta.GetString(tools.MetaApprovedBy) != "U0ALICE") {
				t.Errorf("got calls %v, want the one approved by U0ALICE", calls)
			}
			if !tc.approve && len(calls) != 0 {
				t.Errorf("got %d calls after a rejection, want none", len(calls))
			}
		})
	}
}

// TestPerUserCallWithoutSlackThread: a task that has no Slack thread and no
// target (nobody can be asked) answers a per-user server's call with an
// error at once, in the same step; an ordinary tool of the same step still
// waits for its result.
func TestPerUserCallWithoutSlackThread(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{func(w http.ResponseWriter, r *fakes.ChatRequest) {
		writeJSON(w, completion(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
			map[string]any{"id": "a", "type": "function", "function": map[string]any{"name": "hosted__whoami", "arguments": "{}"}},
			map[string]any{"id": "b", "type": "function", "function": map[string]any{"name": "everything__echo", "arguments": `{"message":"hi"}`}},
		}}))
	}})
	svc := h.idle(t, 0)
	origin := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "pushed to main")
	origin.Meta.Thread = "github:Codertocat/Hello-World"
	task := &Task{ID: "t-no-thread", Status: StatusRunning, Origin: origin, Messages: []Message{{Role: "user", Content: "go"}},
		Tools: []OfferedTool{
			{ToolSpec: ToolSpec{Name: "hosted__whoami"}, Tool: "hosted.whoami", PerUser: true},
			{ToolSpec: ToolSpec{Name: "everything__echo"}, Tool: "everything.echo"},
		}}
	if task.hasSlackThread() {
		t.Fatal("a repository's push has a Slack thread?")
	}
	next, err := svc.think(t.Context(), task)
	if err != nil {
		t.Fatal(err)
	}
	if next.Status != StatusWaiting || len(next.Calls) != 2 {
		t.Fatalf("got %s with calls %+v, want waiting for the echo", next.Status, next.Calls)
	}
	refused, echo := next.Calls[0], next.Calls[1]
	if !refused.Done || !refused.Failed || !refused.Local || refused.Approval || refused.Output != noApprovalThread("hosted.whoami") {
		t.Errorf("got the per-user call %+v, want it refused at once", refused)
	}
	if echo.Done || echo.Approval {
		t.Errorf("got the echo call %+v, want it pending on tool.call", echo)
	}
}

// TestHasSlackThread: a Slack origin or a target (whose approval thread
// the approvals worker opens) is somewhere to ask.
func TestHasSlackThread(t *testing.T) {
	t.Parallel()
	slack := &Task{Origin: slackMention(false, false)}
	gh := &Task{Origin: githubIssueOpened(), Target: &envelope.Target{Channel: "github", Owner: "o", Repo: "r", Number: 1}}
	internal := &Task{Origin: envelope.New(envelope.ChannelInternal, envelope.RoleUser, "x")}
	if !slack.hasSlackThread() || !gh.hasSlackThread() || internal.hasSlackThread() {
		t.Errorf("got slack %t, github %t, internal %t; want true, true, false", slack.hasSlackThread(), gh.hasSlackThread(), internal.hasSlackThread())
	}
}
