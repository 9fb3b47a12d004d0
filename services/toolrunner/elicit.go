package toolrunner

import "github.com/relaystation/relay/envelope"

// ActsFor is the person a call acts for, who answers the server's questions
// (elicitation): meta "acts_for" when set; else, for a call no agent made
// (no meta.agent) from a Slack thread, the Slack user who wrote it
// (meta.source.actor). An agent's call acts for nobody in particular: an
// approver answers.
func ActsFor(call *envelope.Envelope) string {
	if v, ok := call.Meta.Get("acts_for"); ok {
		s, _ := v.(string)
		return s
	}
	if _, agent := call.Meta.Get("agent"); agent {
		return ""
	}
	if call.Channel == envelope.ChannelSlack && call.Meta.Source != nil {
		return call.Meta.Source.Actor
	}
	return ""
}

// tokensLeft is what the call's task may still spend on the server's
// sampling requests, from meta.budget {tokens, limit}: 0 when no limit
// applies; at least 1 when one does, so a spent budget refuses sampling.
func tokensLeft(call *envelope.Envelope) int {
	b := call.Meta.Budget
	if b == nil || b.Limit <= 0 {
		return 0
	}
	return max(b.Limit-b.Tokens, 1)
}
