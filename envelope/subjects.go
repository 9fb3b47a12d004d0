package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Subjects are written relative to the bus prefix ("relay" unless configured
// otherwise): publishing to Inbound(ChannelGitHub, "issues") reaches the NATS
// subject relay.in.github.issues. The table of subjects is in docs/architecture.md.
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
	// SubjectToolProgress carries the statuses of tool calls that run as
	// MCP tasks (the tool runner's meta.tool_progress).
	SubjectToolProgress = "system.tool.progress"
	// SubjectAudit carries audit records: audit.{component}.
	SubjectAudit = "audit"
)

// Inbound returns the subject of an inbound envelope, in.{channel}.{event}.
func Inbound(ch Channel, event string) string {
	return SubjectInbound + "." + Token(string(ch)) + "." + Token(event)
}

// MaxToken is the longest subject token Token returns, in bytes. Tokens come
// from requests (a Slack event type, a Sentry resource header, an OpenProject
// action); uncapped, one long value makes a subject over NATS's control-line
// limit, and the server answers by closing the connection.
const MaxToken = 64

// Token makes s usable as one subject token: dots, spaces, wildcards and other
// characters NATS treats specially become '_', and an empty s becomes "_". A
// token longer than MaxToken keeps its first bytes and ends in '_' and 8 hex
// digits of the SHA-256 of s, so distinct long values stay distinct.
func Token(s string) string {
	if s == "" {
		return "_"
	}
	clean := len(s) <= MaxToken
	for i := 0; clean && i < len(s); i++ {
		clean = tokenByte(s[i])
	}
	if clean {
		return s
	}
	keep := min(len(s), MaxToken)
	long := len(s) > MaxToken
	if long {
		keep = MaxToken - 9
	}
	var b strings.Builder
	b.Grow(MaxToken)
	for i := 0; i < keep; i++ {
		if tokenByte(s[i]) {
			b.WriteByte(s[i])
		} else {
			b.WriteByte('_')
		}
	}
	if long {
		sum := sha256.Sum256([]byte(s))
		b.WriteByte('_')
		b.WriteString(hex.EncodeToString(sum[:4]))
	}
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':'
}
