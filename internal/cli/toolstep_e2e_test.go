package cli

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/oauthtest"
)

// stepPost waits for the approval message of an agent's call of tool in
// channel (thread "" : a message of its own) and returns it.
func (s *stack) stepPost(channel, thread, tool string) fakes.SlackCall {
	s.t.Helper()
	return s.slackCall("the approval message of the agent's call of "+tool, func(c fakes.SlackCall) bool {
		return c.Method == "chat.postMessage" && c.Params["channel"] == channel && c.Params["thread_ts"] == thread &&
			strings.Contains(c.Params["text"], "the agent asks to run "+tool) && len(c.Actions()) == 2
	}, "chat.postMessage")
}

// ephemeralTo waits for an ephemeral message to user whose text has want.
func (s *stack) ephemeralTo(user, want string) fakes.SlackCall {
	s.t.Helper()
	return s.slackCall("an ephemeral message to "+user+" with "+want, func(c fakes.SlackCall) bool {
		return c.Params["user"] == user && strings.Contains(c.Params["text"], want)
	}, "chat.postEphemeral")
}

// inThread waits for a message in channel's thread thread whose text has want.
func (s *stack) inThread(channel, thread, want string) fakes.SlackCall {
	s.t.Helper()
	return s.slackCall("a message in thread "+thread+" with "+want, func(c fakes.SlackCall) bool {
		return c.Params["channel"] == channel && c.Params["thread_ts"] == thread && strings.Contains(c.Params["text"], want)
	}, "chat.postMessage")
}

// TestAgentPerUserToolApproval: the agent (scripted model) calls the tool
// of a per-user OAuth server ("oauth": {"per": "user"}) on tasks from
// Slack and from GitHub, through `relay serve` with the real tool runner and
// approvals worker. The call is not run until an approver approves it in the
// task's thread; it then runs with the approver's own token (the server
// answers with the token's user), once however often they click. A
// non-approver's click does nothing; an approver who has not connected gets
// one ephemeral link, the thread says so, and the model is told; a rejection
// reaches the model with who rejected it. A GitHub task is asked about in
// the approval channel, and its answer follows in the same thread.
func TestAgentPerUserToolApproval(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "end-to-end")
	srv := oauthtest.Start(t, oauthtest.Options{})
	pol := "roles:\n  - role: agent\n    capabilities: [\"everything.*\", \"hosted.*\"]\n"
	s, audit := startPerUserStack(t, srv, pol, func(env map[string]string) {
		env["SLACK_APPROVERS"] = e2eAlice + "," + e2eCarol
	})
	s.connectAccount(srv, e2eAlice, "alice")
	testenv.WaitFor(t, 30*time.Second, "the agent's tool list to show hosted.whoami as per-user", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		list, err := tools.ListRemote(ctx, s.nc, "relay", "agent")
		return err == nil && slices.ContainsFunc(list, func(ti tools.ToolInfo) bool { return ti.Name == "hosted.whoami" && ti.PerUser })
	})

	t.Run("approved", func(t *testing.T) {
		s := s.with(t)
		thread := s.mention(e2eStranger, e2eChannel, "<@UBOT> who am I at hosted? scenario:per-user")
		post := s.stepPost(e2eChannel, thread, "hosted.whoami")
		if !strings.Contains(post.Params["blocks"], "approver's own account") {
			t.Errorf("the approval message does not say whose account runs the call: %s", post.Params["blocks"])
		}
		before := srv.Calls.Load()
		// A non-approver's click is refused and runs nothing.
		s.click(e2eStranger, post, "approve")
		s.ephemeralTo(e2eStranger, "only approvers")
		if n := srv.Calls.Load(); n != before {
			t.Fatalf("the server got %d calls after a non-approver's click, want none", n-before)
		}
		// Alice approves (twice, as a double click): one call, with her token.
		s.click(e2eAlice, post, "approve")
		s.click(e2eAlice, post, "approve")
		s.inThread(e2eChannel, thread, "The per-user tool said: user:alice")
		s.updatedTo(post, "Approved")
		if n := srv.Calls.Load(); n != before+1 {
			t.Errorf("the server got %d calls, want 1", n-before)
		}
		testenv.WaitFor(t, 30*time.Second, "the audit record naming alice", func() bool {
			raw, err := os.ReadFile(audit)
			return err == nil && strings.Contains(string(raw), `"principal":"`+e2eAlice+`"`)
		})
	})

	t.Run("unconnected approver", func(t *testing.T) {
		s := s.with(t)
		thread := s.mention(e2eStranger, e2eChannel, "<@UBOT> who am I at hosted, again? scenario:per-user")
		post := s.stepPost(e2eChannel, thread, "hosted.whoami")
		before := srv.Calls.Load()
		s.click(e2eCarol, post, "approve")
		link := s.connectLink(e2eCarol, 0)
		if !strings.Contains(link, "/oauth/connect?t=") {
			t.Fatalf("got %q, want a connection link", link)
		}
		s.inThread(e2eChannel, thread, "has not connected their own account to *hosted*")
		answer := s.inThread(e2eChannel, thread, "The per-user tool said: error:")
		if !strings.Contains(answer.Params["text"], "/relay connect hosted") {
			t.Errorf("the model was not told to connect: %s", answer.Params["text"])
		}
		if n := srv.Calls.Load(); n != before {
			t.Errorf("the server got %d calls for carol, want none (never someone else's token)", n-before)
		}
		n := 0
		for _, c := range s.slack.Calls("chat.postEphemeral") {
			if c.Params["user"] == e2eCarol && linkRE.MatchString(c.Params["text"]) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("got %d ephemeral links for carol, want 1", n)
		}
	})

	t.Run("rejected", func(t *testing.T) {
		s := s.with(t)
		thread := s.mention(e2eStranger, e2eChannel, "<@UBOT> who am I at hosted, once more? scenario:per-user")
		post := s.stepPost(e2eChannel, thread, "hosted.whoami")
		before := srv.Calls.Load()
		s.submitModalAs(e2eAlice, post, "reject", "hosted.whoami", map[string]map[string]string{"reason": {"reason": "not today"}})
		answer := s.inThread(e2eChannel, thread, "The per-user tool said: error:")
		if !strings.Contains(answer.Params["text"], "rejected by") || !strings.Contains(answer.Params["text"], e2eAlice) ||
			!strings.Contains(answer.Params["text"], "not today") {
			t.Errorf("the model was not told who rejected the call and why: %s", answer.Params["text"])
		}
		s.updatedTo(post, "Rejected")
		if n := srv.Calls.Load(); n != before {
			t.Errorf("the server got %d calls after a rejection, want none", n-before)
		}
	})

	t.Run("github task", func(t *testing.T) {
		s := s.with(t)
		target := s.issueOpened(4301, "per-user")
		post := s.stepPost(e2eChannel, "", "hosted.whoami")
		s.click(e2eAlice, post, "approve")
		// The answer is put up for approval in the tool step's thread.
		answer := s.approvalPost(target)
		if answer.Params["thread_ts"] != post.Params["_ts"] {
			t.Errorf("the answer's approval message is in thread %q, want the tool step's %q", answer.Params["thread_ts"], post.Params["_ts"])
		}
		if !strings.Contains(answer.Params["text"]+answer.Params["blocks"], "user:alice") {
			t.Errorf("the answer does not show alice's identity: %s", answer.Params["blocks"])
		}
	})
}
