package story

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
)

// summaryLen bounds a hop's summary, in bytes.
const summaryLen = 160

// Subjects and meta keys of the step records the story reads (relative to
// the bus prefix). The agent publishes one SubjectModelCall envelope per
// model call, meta.model_call; outbound one SubjectPosted per post,
// meta.posted.
const (
	SubjectModelCall = "task.step"
	SubjectPosted    = "task.posted"
	MetaModelCall    = "model_call"
	MetaPosted       = "posted"
)

// ModelCall is meta.model_call of a task.step envelope.
type ModelCall struct {
	Model            string   `json:"model"`
	Step             int      `json:"step"`
	PromptTokens     int      `json:"prompt_tokens"`
	CompletionTokens int      `json:"completion_tokens"`
	DurationMS       int64    `json:"duration_ms"`
	ToolCalls        []string `json:"tool_calls,omitempty"`
	Finish           string   `json:"finish,omitempty"`
	Error            string   `json:"error,omitempty"`
}

// Posted is meta.posted of a task.posted envelope.
type Posted struct {
	Target     string `json:"target"`
	ProviderID string `json:"provider_id,omitempty"`
	URL        string `json:"url,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Existing   bool   `json:"existing,omitempty"`
	Key        string `json:"key,omitempty"`
}

// hopOf turns one stored message into a hop.
func hopOf(f found) Hop {
	h := Hop{Time: f.time, Subject: f.subject, Stream: f.stream, Seq: f.seq,
		TraceID: TraceID(f.header.Get("traceparent")), Envelope: json.RawMessage(f.data)}
	root, rest, _ := strings.Cut(f.subject, ".")
	if root == envelope.SubjectDLQ {
		deadLetterHop(&h, f.data)
		return h
	}
	var e envelope.Envelope
	if err := json.Unmarshal(f.data, &e); err != nil {
		h.Kind, h.Summary = KindNotice, "unreadable message: "+clip.To(err.Error(), summaryLen)
		return h
	}
	h.Task = e.Meta.TaskID
	if !e.Timestamp.IsZero() && h.Time.IsZero() {
		h.Time = e.Timestamp
	}
	describe(&h, &e, root, rest)
	if h.Summary == "" {
		h.Summary = clip.Line(e.Content, summaryLen)
	}
	return h
}

// describe fills kind, summary, actor and link from the subject and envelope.
func describe(h *Hop, e *envelope.Envelope, root, rest string) {
	switch root {
	case envelope.SubjectInbound:
		webhookHop(h, e, rest)
	case "tool":
		toolHop(h, e, rest)
	case "agent":
		h.Kind = KindNotice
		if rest == "suggestion" {
			h.Kind = KindSuggestion
			if t, err := e.Meta.Target(); err == nil && t != nil {
				h.Summary = "for " + t.String() + ": " + clip.Line(e.Content, summaryLen)
			}
		}
	case "approval":
		approvalHop(h, e)
	case "hook":
		h.Kind = KindHook
	case "out":
		h.Kind = KindOutbound
		h.Summary = "to " + rest + ": " + clip.Line(e.Content, summaryLen)
	case "task":
		taskHop(h, e, rest)
	case envelope.SubjectAudit:
		h.Kind = KindAudit
	case "memory":
		h.Kind = KindMemory
	default:
		h.Kind = KindNotice
	}
}

func webhookHop(h *Hop, e *envelope.Envelope, event string) {
	h.Kind = KindWebhook
	name := event
	if s := e.Meta.Source; s != nil {
		h.Actor, h.Link = s.Actor, s.URL
		if s.Action != "" {
			name += "." + s.Action
		}
		if s.DeliveryID != "" {
			name += " (delivery " + s.DeliveryID + ")"
		}
	}
	h.Summary = name + ": " + clip.Line(e.Content, summaryLen)
}

func toolHop(h *Hop, e *envelope.Envelope, what string) {
	h.Kind = KindToolResult
	if what == "call" {
		h.Kind = KindToolCall
	}
	tc := e.ToolCall
	if tc == nil {
		return
	}
	switch h.Kind {
	case KindToolCall:
		args, _ := json.Marshal(tc.Args)
		h.Summary = tc.Name + " " + clip.To(string(args), summaryLen)
	default:
		res, _ := json.Marshal(tc.Result)
		h.Summary = tc.Name + " " + what + ": " + clip.To(string(res), summaryLen)
	}
}

func approvalHop(h *Hop, e *envelope.Envelope) {
	h.Kind = KindApproval
	var a struct {
		Status    string    `json:"status"`
		DecidedBy string    `json:"decided_by"`
		EditedBy  string    `json:"edited_by"`
		Reason    string    `json:"reason"`
		DecidedAt time.Time `json:"decided_at"`
	}
	if !metaAs(e, "approval", &a) {
		return
	}
	if !a.DecidedAt.IsZero() {
		h.Time = a.DecidedAt // the click, not the record published after the answer
	}
	h.Actor = a.DecidedBy
	s := a.Status
	if a.DecidedBy != "" {
		s += " by " + a.DecidedBy
	}
	if a.EditedBy != "" {
		s += ", edited by " + a.EditedBy
	}
	if a.Reason != "" {
		s += ": " + clip.Line(a.Reason, summaryLen)
	}
	h.Summary = s
}

func taskHop(h *Hop, e *envelope.Envelope, what string) {
	switch "task." + what {
	case SubjectModelCall:
		h.Kind = KindModelCall
		var mc ModelCall
		if metaAs(e, MetaModelCall, &mc) {
			h.Duration = time.Duration(mc.DurationMS) * time.Millisecond
			h.Tokens = &Tokens{Prompt: mc.PromptTokens, Completion: mc.CompletionTokens}
			h.Summary = modelSummary(&mc)
		}
	case SubjectPosted:
		h.Kind = KindOutbound
		var p Posted
		if metaAs(e, MetaPosted, &p) {
			h.Duration = time.Duration(p.DurationMS) * time.Millisecond
			h.Link = p.URL
			h.Summary = "posted to " + p.Target
			if p.ProviderID != "" {
				h.Summary += " (" + p.ProviderID + ")"
			}
			if p.Existing {
				h.Summary += ", found already posted"
			}
		}
	default:
		h.Kind = KindNotice
	}
}

func modelSummary(mc *ModelCall) string {
	s := fmt.Sprintf("%s step %d: %d+%d tokens", mc.Model, mc.Step, mc.PromptTokens, mc.CompletionTokens)
	switch {
	case mc.Error != "":
		s += ", failed: " + clip.Line(mc.Error, summaryLen)
	case len(mc.ToolCalls) > 0:
		s += ", calls " + strings.Join(mc.ToolCalls, ", ")
	case mc.Finish != "":
		s += ", " + mc.Finish
	}
	return s
}

func deadLetterHop(h *Hop, data []byte) {
	h.Kind = KindDeadLetter
	var dl bus.DeadLetter
	if json.Unmarshal(data, &dl) != nil {
		h.Summary = "unreadable dead letter"
		return
	}
	h.Task = envelope.DecodeHeader(dl.Header).TaskID
	h.TraceID = TraceID(firstOf(dl.Header["traceparent"]))
	h.Summary = dl.Consumer + " gave up on " + dl.Subject + ": " + clip.Line(dl.Reason, summaryLen)
	h.Envelope = dl.Envelope
}

// metaAs decodes an extra meta key into v.
func metaAs(e *envelope.Envelope, key string, v any) bool {
	raw, ok := e.Meta.Get(key)
	if !ok {
		return false
	}
	b, err := json.Marshal(raw)
	return err == nil && json.Unmarshal(b, v) == nil
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// TraceID returns the trace id of a W3C traceparent header
// ("00-<trace id>-<span id>-<flags>"), or "".
func TraceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// NewRecord returns a step record (a system envelope) of the task, thread
// and webhook of `of`, with the record under meta[key]: what the agent
// publishes on SubjectModelCall and outbound on SubjectPosted.
func NewRecord(of *envelope.Meta, content, key string, record any) *envelope.Envelope {
	e := envelope.New(envelope.ChannelInternal, envelope.RoleSystem, content)
	e.Meta.TaskID, e.Meta.Thread = of.TaskID, of.Thread
	if of.Source != nil {
		src := *of.Source
		e.Meta.Source = &src
	}
	e.Meta.Set(key, record)
	return e
}
