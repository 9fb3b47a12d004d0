// Package envelope defines the MCP message: the one uniform envelope that every
// relay component publishes on and consumes from the bus.
//
// The JSON Schema in package schemas is the source of truth; the Envelope type
// mirrors it and Validate checks an envelope (or raw JSON) against it. The package
// also owns the thread keys, the bus subjects and the NATS header codec, so that
// every producer and consumer agrees on them.
package envelope

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Version is the semantic version of the envelope format written to meta.mcp_version.
// A breaking change to the schema increments its major.
const Version = "1.0.0"

// Channel is where an envelope came from or is going to.
type Channel string

// The channels of the schema's enum.
const (
	ChannelSlack       Channel = "slack"
	ChannelGitHub      Channel = "github"
	ChannelSentry      Channel = "sentry"
	ChannelOpenProject Channel = "openproject"
	ChannelInternal    Channel = "internal"
)

// Role says who speaks in an envelope.
type Role string

// The roles of the schema's enum.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
	RoleSystem    Role = "system"
)

// Envelope is the MCP message. Its JSON form is described by
// schemas/mcp-message.schema.json. An Envelope is a plain value: it is not safe
// for concurrent mutation, but may be read concurrently.
type Envelope struct {
	ID            string        `json:"id"`
	Timestamp     time.Time     `json:"timestamp"`
	Channel       Channel       `json:"channel"`
	Role          Role          `json:"role"`
	Context       *Context      `json:"context,omitempty"`
	Content       string        `json:"content"`
	ToolCall      *ToolCall     `json:"tool_call,omitempty"`
	MemoryUpdate  *MemoryUpdate `json:"memory_update,omitempty"`
	RetrievalRefs []string      `json:"retrieval_refs,omitempty"`
	Meta          Meta          `json:"meta"`
}

// Context holds the layered context of an envelope.
type Context struct {
	// System is high-level policy or guardrails.
	System string `json:"system,omitempty"`
	// Session is the conversation or thread summary.
	Session string `json:"session,omitempty"`
	// Task is the short-lived task description.
	Task string `json:"task,omitempty"`
}

// ToolCall is a request to run a tool and, once run, its result.
type ToolCall struct {
	// ID correlates a call with its result (an LLM's tool call id); optional.
	ID string `json:"id,omitempty"`
	// Name is the tool, usually "<server>.<tool>".
	Name string `json:"name"`
	// Args are the tool's arguments.
	Args map[string]any `json:"args,omitempty"`
	// Result is nil until the tool ran. A failed run carries result.error.
	Result map[string]any `json:"result,omitempty"`
}

// MemoryKind selects where a memory update is kept.
type MemoryKind string

// The memory kinds of the schema's enum.
const (
	MemoryEpisodic MemoryKind = "episodic"
	MemoryLongTerm MemoryKind = "long_term"
)

// MemoryUpdate asks the memory worker to remember something.
type MemoryUpdate struct {
	Kind MemoryKind     `json:"kind"`
	Data map[string]any `json:"data"`
	// TTL is how long the memory lives, in seconds; 0 means the store's default.
	TTL int64 `json:"ttl,omitempty"`
}

// Source describes the webhook an envelope originated from.
type Source struct {
	Event      string `json:"event,omitempty"`
	Action     string `json:"action,omitempty"`
	DeliveryID string `json:"delivery_id,omitempty"`
	URL        string `json:"url,omitempty"`
	Actor      string `json:"actor,omitempty"`
}

// Budget carries the token estimate used by truncation.
type Budget struct {
	// Tokens is the estimated token count of the envelope's text.
	Tokens int `json:"tokens"`
	// Limit, when set, is the most tokens the consumer should spend on it.
	Limit int `json:"limit,omitempty"`
}

// EstimateTokens is the estimate of text's tokens that an inbound mapper
// writes to meta.budget: one token per four bytes, rounded up, the usual
// rule of thumb for BPE tokenizers (no model's tokenizer is at hand where
// webhooks are mapped).
func EstimateTokens(text string) int { return (len(text) + 3) / 4 }

// New returns an envelope with a fresh UUID v4, the current time (UTC, to the
// microsecond) and meta.mcp_version set.
func New(ch Channel, role Role, content string) *Envelope {
	return &Envelope{
		ID:        uuid.NewString(),
		Timestamp: time.Now().UTC().Truncate(time.Microsecond),
		Channel:   ch,
		Role:      role,
		Content:   content,
		Meta:      Meta{MCPVersion: Version},
	}
}

// Reply returns a new envelope that continues e: same thread and task, the given
// channel, role and content.
func (e *Envelope) Reply(ch Channel, role Role, content string) *Envelope {
	r := New(ch, role, content)
	r.Meta.Thread = e.Meta.Thread
	r.Meta.TaskID = e.Meta.TaskID
	if e.Context != nil {
		c := *e.Context
		r.Context = &c
	}
	return r
}

// Marshal returns the JSON form of e.
func (e *Envelope) Marshal() ([]byte, error) {
	b, err := e.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("marshal envelope %s: %w", e.ID, err)
	}
	return b, nil
}

// Parse decodes and validates raw JSON into an envelope. The error is a
// *ValidationError when the JSON is well formed but breaks the schema.
//
// An envelope the fast path (parseFast) can vouch for is decoded in one pass;
// anything else, every invalid envelope among it, goes through the JSON Schema
// validator (parseChecked), so the outcome and the error are the validator's.
func Parse(b []byte) (*Envelope, error) {
	if e, ok := parseFast(b); ok {
		return e, nil
	}
	return parseChecked(b)
}

// ParseFast is Parse's one-pass path alone, for callers with their own answer
// to everything else: it returns the envelope and true only when Parse would
// accept b and return that very envelope (which is also what encoding/json
// decodes from b). False says nothing about b: it may still be valid.
func ParseFast(b []byte) (*Envelope, bool) {
	return parseFast(b)
}

// parseChecked is Parse by the reference: the JSON Schema validator, then
// encoding/json.
func parseChecked(b []byte) (*Envelope, error) {
	if err := ValidateJSON(b); err != nil {
		return nil, err
	}
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, &ValidationError{Field: "/", Reason: err.Error()}
	}
	return &e, nil
}
