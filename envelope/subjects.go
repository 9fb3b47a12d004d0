package envelope

import "strings"

// Subjects are written relative to the bus prefix ("relay" unless configured
// otherwise): publishing to Inbound(ChannelGitHub, "issues") reaches the NATS
// subject relay.in.github.issues. The table of subjects is in the README.
const (
	// SubjectInbound is the root of every inbound envelope: in.{channel}.{event}.
	SubjectInbound = "in"
	// SubjectDLQ is the root of dead letters: dlq.{consumer}.{original subject}.
	SubjectDLQ = "dlq"
	// SubjectToolCall carries assistant envelopes whose tool_call asks for a run.
	SubjectToolCall = "tool.call"
	// SubjectToolResult carries tool envelopes with tool_call.result.
	SubjectToolResult = "tool.result"
	// SubjectToolFailed carries tool envelopes whose run failed (result.error set).
	SubjectToolFailed = "tool.failed"
	// SubjectSystem carries system notices: system.{kind}.
	SubjectSystem = "system"
	// SubjectAudit carries audit records: audit.{component}.
	SubjectAudit = "audit"
)

// Inbound returns the subject of an inbound envelope, in.{channel}.{event}.
func Inbound(ch Channel, event string) string {
	return SubjectInbound + "." + Token(string(ch)) + "." + Token(event)
}

// Token makes s usable as one subject token: dots, spaces, wildcards and other
// characters NATS treats specially become '_', and an empty s becomes "_".
func Token(s string) string {
	if s == "" {
		return "_"
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if tokenByte(s[i]) {
			b.WriteByte(s[i])
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':'
}
