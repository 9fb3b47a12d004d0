// Package story tells what happened to one webhook: it reads the relay's
// streams over NATS and returns every envelope of a delivery, a thread or a
// task (the inbound webhook, the agent's model calls, tool calls and
// results, the suggestion, the approval, hook executions, the outbound posts
// with their links, notices and dead letters) as one timeline of hops.
//
// Cost: the streams carry the thread, task and delivery ids in message
// headers (envelope.EncodeHeader), so Build reads headers only (an ordered,
// headers-only consumer, a few hundred bytes a message, no bodies) and then
// fetches the bodies of the matching messages by sequence. The inbound
// stream is read from Options.Since (default: its whole retention); the
// work stream only from the first matching inbound message on, since
// nothing of a webhook's story comes before it. Dead letters are read whole
// (their headers are inside the record), from the same start.
package story

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
)

// Story is the timeline of one delivery, thread or task.
type Story struct {
	// Query is the id asked for.
	Query string `json:"query"`
	// Thread is the thread key of the story (the first one seen).
	Thread string `json:"thread,omitempty"`
	// Tasks are the agent tasks of the story, in order of appearance.
	Tasks []string `json:"tasks,omitempty"`
	// Deliveries are the provider delivery ids of the story's webhooks.
	Deliveries []string `json:"deliveries,omitempty"`
	// Hops are the story's messages, oldest first.
	Hops []Hop `json:"hops"`
	// Scanned is how many messages' headers were read to build it.
	Scanned int `json:"scanned"`
}

// Hop is one message of a story.
type Hop struct {
	Time     time.Time     `json:"time"`
	Since    time.Duration `json:"since_previous"` // time since the previous hop
	Kind     string        `json:"kind"`           // see the Kind constants
	Subject  string        `json:"subject"`        // relative to the bus prefix
	Actor    string        `json:"actor,omitempty"`
	Summary  string        `json:"summary"`
	Link     string        `json:"link,omitempty"` // the posted comment, the webhook's source
	Duration time.Duration `json:"duration,omitempty"`
	Tokens   *Tokens       `json:"tokens,omitempty"` // model calls
	TraceID  string        `json:"trace_id,omitempty"`
	// Task is the hop's task id, Stream and Seq where it is stored.
	Task     string          `json:"task,omitempty"`
	Stream   string          `json:"stream"`
	Seq      uint64          `json:"seq"`
	Envelope json.RawMessage `json:"envelope,omitempty"`
}

// Tokens are a model call's token counts.
type Tokens struct {
	Prompt     int `json:"prompt"`
	Completion int `json:"completion"`
}

// Hop kinds.
const (
	KindWebhook    = "webhook"
	KindModelCall  = "model_call"
	KindToolCall   = "tool_call"
	KindToolResult = "tool_result"
	KindSuggestion = "suggestion"
	KindApproval   = "approval"
	KindHook       = "hook"
	KindOutbound   = "outbound"
	KindNotice     = "notice"
	KindDeadLetter = "dead_letter"
	KindAudit      = "audit"
	KindMemory     = "memory"
)

// Options bound a Build.
type Options struct {
	// Since is how far back the inbound stream is read; 0 reads all of it.
	Since time.Duration
	// Limit is the most hops returned (the oldest ones); default 1000.
	Limit int
	// Now is the clock for Since; default time.Now.
	Now func() time.Time
}

// ErrNotFound is returned when no message matches the id.
var ErrNotFound = errors.New("no delivery, thread or task matches")

// Build returns the story of id (a delivery id, thread key or task id),
// reading the whole retention of the inbound stream.
func Build(ctx context.Context, b *bus.Bus, id string) (*Story, error) {
	return BuildWith(ctx, b, id, Options{})
}

// BuildWith is Build with bounds. The error wraps ErrNotFound when nothing
// matches.
func BuildWith(ctx context.Context, b *bus.Bus, id string, o Options) (*Story, error) {
	if id == "" {
		return nil, errors.New("story: empty id")
	}
	if o.Limit <= 0 {
		o.Limit = 1000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var from time.Time
	if o.Since > 0 {
		from = o.Now().Add(-o.Since)
	}
	m := newMatcher(id)
	r := &reader{b: b, m: m}
	st := &Story{Query: id}
	start, err := r.scan(ctx, b.StreamName(envelope.SubjectInbound), from, true)
	if err != nil {
		return nil, err
	}
	if !start.IsZero() {
		from = start.Add(-time.Second) // clock skew between publishers
	}
	if _, err := r.scan(ctx, b.StreamName("task"), from, true); err != nil {
		return nil, err
	}
	if _, err := r.scan(ctx, b.StreamName(envelope.SubjectDLQ), from, false); err != nil {
		return nil, err
	}
	st.Scanned = r.scanned
	if len(r.found) == 0 {
		return nil, fmt.Errorf("%w %q (read %d messages)", ErrNotFound, id, r.scanned)
	}
	if err := r.hops(ctx, st, o.Limit); err != nil {
		return nil, err
	}
	return st, nil
}

// finish orders the hops, fills in the time between them and the story's
// ids.
func (st *Story) finish() {
	slices.SortStableFunc(st.Hops, func(a, b Hop) int { return a.Time.Compare(b.Time) })
	for i := range st.Hops {
		if i > 0 {
			st.Hops[i].Since = st.Hops[i].Time.Sub(st.Hops[i-1].Time)
		}
	}
}

// addID appends v to ids once.
func addID(ids []string, v string) []string {
	if v == "" || slices.Contains(ids, v) {
		return ids
	}
	return append(ids, v)
}
