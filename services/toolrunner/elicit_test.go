package toolrunner

import (
	"testing"

	"github.com/relaystation/relay/envelope"
)

func TestActsForAndTokensLeft(t *testing.T) {
	t.Parallel()
	mk := func(ch envelope.Channel, mod func(e *envelope.Envelope)) *envelope.Envelope {
		e := envelope.New(ch, envelope.RoleAssistant, "call")
		e.Meta.Source = &envelope.Source{Actor: "U0AUTHOR1"}
		mod(e)
		return e
	}
	tests := []struct {
		name    string
		call    *envelope.Envelope
		actsFor string
		left    int
	}{
		{"code block from Slack: its author", mk(envelope.ChannelSlack, func(*envelope.Envelope) {}), "U0AUTHOR1", 0},
		{"agent's task: an approver", mk(envelope.ChannelSlack, func(e *envelope.Envelope) {
			e.Meta.Set("agent", map[string]any{"id": "a", "role": "agent"})
			e.Meta.Budget = &envelope.Budget{Tokens: 1200, Limit: 32000}
		}), "", 30800},
		{"explicit acts_for", mk(envelope.ChannelGitHub, func(e *envelope.Envelope) { e.Meta.Set("acts_for", "U0OTHER01") }), "U0OTHER01", 0},
		{"GitHub without agent: nobody", mk(envelope.ChannelGitHub, func(*envelope.Envelope) {}), "", 0},
		{"budget spent", mk(envelope.ChannelSlack, func(e *envelope.Envelope) {
			e.Meta.Set("agent", map[string]any{"id": "a"})
			e.Meta.Budget = &envelope.Budget{Tokens: 40000, Limit: 32000}
		}), "", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := request(withToolCall(tc.call))
			if req.ActsFor != tc.actsFor || req.TokenBudget != tc.left {
				t.Errorf("got acts for %q, %d tokens left; want %q, %d", req.ActsFor, req.TokenBudget, tc.actsFor, tc.left)
			}
		})
	}
}

func withToolCall(e *envelope.Envelope) *envelope.Envelope {
	e.ToolCall = &envelope.ToolCall{Name: "svc.echo"}
	return e
}

// TestRequestRunID: a call's meta.run_id (a code-block run sets its thread
// key) is the audit run id; without it the runner's default applies.
func TestRequestRunID(t *testing.T) {
	t.Parallel()
	e := withToolCall(envelope.New(envelope.ChannelSlack, envelope.RoleAssistant, "run"))
	e.Meta.TaskID = "task-1"
	if got := request(e).RunID; got != "" {
		t.Errorf("without meta.run_id: RunID %q, want empty (the runner defaults it to the task id)", got)
	}
	e.Meta.Set("run_id", "slack:T1:C1:1700000000.000100")
	if got := request(e).RunID; got != "slack:T1:C1:1700000000.000100" {
		t.Errorf("RunID %q, want meta.run_id", got)
	}
}
