package agent

import (
	"fmt"

	"github.com/relaystation/relay/envelope"
)

// Tool steps of per-user servers. A server whose mcp.json entry says
// "oauth": {"per": "user"} runs each call with the connection of the person
// it acts for; an agent's call acts for nobody until a person approves it.
// So the agent does not put such a call on tool.call: it publishes the very
// same envelope on agent.toolstep, and the task waits as for any call. The
// approvals worker asks in the task's Slack thread (the origin's thread, or
// the approval thread of a task from GitHub, Sentry, ...), and an approver's
// Approve publishes the envelope on tool.call with meta "approved_by" (that
// person's connection is used); a rejection or an expiry answers it with a
// tool.failed naming who rejected it. Either way the result comes back on
// the task's ordinary result path, so the loop goes on.

// SubjectToolStep carries an agent's tool call that waits for a person's
// approval (a per-user server's), relative to the bus prefix.
const SubjectToolStep = "agent.toolstep"

// perUserNote is added to the description of a per-user server's tools, so
// the model knows a person decides about each call.
const perUserNote = "(Runs with the account of the person who approves the call in Slack; they may reject it.)"

// hasSlackThread reports whether a person can be asked in Slack about t's
// calls: its origin is a Slack thread, or it has a target, whose approval
// thread the approvals worker opens (a Slack target is a thread itself).
func (t *Task) hasSlackThread() bool {
	return envelope.ThreadChannel(t.Origin.Meta.Thread) == envelope.ChannelSlack || t.Target != nil
}

// noApprovalThread is the model's answer to a per-user server's call on a
// task nobody can be asked about.
func noApprovalThread(tool string) string {
	return fmt.Sprintf("error: %s runs with the account of the person who approves the call in Slack, and this task has no Slack thread to ask in; it was not run", tool)
}

// stepEnvelope makes e, t's call envelope, a tool step: it carries the
// task's target, so the approvals worker knows where a task without a Slack
// origin is discussed.
func stepEnvelope(t *Task, e *envelope.Envelope) {
	if t.Target != nil {
		e.Meta.SetTarget(t.Target)
	}
}
