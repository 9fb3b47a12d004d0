package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
)

// Task statuses.
const (
	// StatusRunning: the next step is the model's (initial, or every call of
	// the step is answered).
	StatusRunning = "running"
	// StatusWaiting: calls of the current step wait for their results.
	StatusWaiting = "waiting"
	// StatusDone: the suggestion is drafted.
	StatusDone = "done"
	// StatusFailed: the task ended with a notice (step limit, token budget,
	// LLM unavailable).
	StatusFailed = "failed"
)

// Failure kinds, in meta.notice.kind of agent.notice envelopes.
const (
	FailStepLimit      = "step_limit"
	FailTokenBudget    = "token_budget"
	FailLLMUnavailable = "llm_unavailable"
	FailBadAnswer      = "bad_answer"
)

// Task is the durable state of one agent task, the value of its key in the
// {prefix}_tasks bucket. Every change is a revision-checked update, so
// competing agent processes never both advance a task.
type Task struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// Origin is the inbound envelope that started the task.
	Origin *envelope.Envelope `json:"origin"`
	// Target is where the answer goes; nil when the origin names none.
	Target  *envelope.Target `json:"target,omitempty"`
	AgentID string           `json:"agent_id"`
	Role    string           `json:"role"`
	// System, Session and TaskText fill the suggestion's context.
	System        string `json:"system,omitempty"`
	Session       string `json:"session,omitempty"`
	SessionTokens int    `json:"session_tokens,omitempty"`
	TaskText      string `json:"task,omitempty"`
	// Refs are every reference given to the model (initial retrieval and
	// retrieve_docs results).
	Refs []Ref `json:"refs,omitempty"`
	// Tools are the functions offered to the model.
	Tools    []OfferedTool `json:"tools,omitempty"`
	Messages []Message     `json:"messages"`
	// Step counts model calls made.
	Step int `json:"step"`
	// Calls are the current step's tool calls.
	Calls []Call `json:"calls,omitempty"`
	// CallsPublished is set once the current step's calls are on the bus.
	CallsPublished bool `json:"calls_published,omitempty"`
	// Tokens counts tokens used (the endpoint's usage, else an estimate).
	Tokens      int      `json:"tokens"`
	Answer      string   `json:"answer,omitempty"`
	UnknownRefs []string `json:"unknown_refs,omitempty"`
	Failure     *Failure `json:"failure,omitempty"`
	// Lease is held by the process asking the model for the next step.
	Lease *Lease `json:"lease,omitempty"`
	// FinalPublished is set once the suggestion or notice is on the bus.
	FinalPublished bool      `json:"final_published,omitempty"`
	Created        time.Time `json:"created"`
	Updated        time.Time `json:"updated"`
}

// Ref is a reference given to the model.
type Ref struct {
	ID   string `json:"id"`
	URI  string `json:"uri,omitempty"`
	Text string `json:"text"`
}

// OfferedTool maps a function offered to the model to the tool that runs it.
type OfferedTool struct {
	ToolSpec
	// Tool is "<server>.<tool>" for MCP tools, or ToolRetrieveDocs.
	Tool string `json:"tool"`
	// PerUser marks a tool of a per-user server ("oauth": {"per": "user"}):
	// its calls wait for a person's approval in Slack and run with that
	// person's own connection (toolstep.go).
	PerUser bool `json:"per_user,omitempty"`
}

// Call is a tool call of the current step.
type Call struct {
	// ID is the bus-level call id (tool_call.id on tool.call and its result):
	// unique within the task.
	ID string `json:"id"`
	// LLMID is the id the model gave the call (answered in the tool message).
	LLMID string         `json:"llm_id"`
	Func  string         `json:"func"`
	Tool  string         `json:"tool"`
	Args  map[string]any `json:"args,omitempty"`
	// Local calls (retrieve_docs, unknown functions, bad arguments) are
	// answered by the agent itself.
	Local bool `json:"local,omitempty"`
	// Approval marks a call of a per-user server: it is published on
	// agent.toolstep for a person to approve in Slack, not on tool.call;
	// the approvals worker publishes it (approved) or answers it with a
	// tool.failed (rejected, expired), and its result comes back like any
	// other (toolstep.go).
	Approval bool   `json:"approval,omitempty"`
	Done     bool   `json:"done,omitempty"`
	Failed   bool   `json:"failed,omitempty"`
	Output   string `json:"output,omitempty"`
}

// Lease marks a task one process is thinking for, until Until (renewed while
// it thinks).
type Lease struct {
	// Owner is the advance call holding it (agent instance and a counter).
	Owner string `json:"owner"`
	// Holder is the delivery that handler works for (consumer and stream
	// sequence): that message's redelivery takes the lease over at once.
	Holder string    `json:"holder,omitempty"`
	Until  time.Time `json:"until"`
}

// Failure says why a task ended without an answer.
type Failure struct {
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
}

// answered reports whether every call of the step has a result.
func (t *Task) answered() bool {
	for _, c := range t.Calls {
		if !c.Done {
			return false
		}
	}
	return true
}

func (t *Task) final() bool { return t.Status == StatusDone || t.Status == StatusFailed }

func (t *Task) refIDs() []string {
	out := make([]string, len(t.Refs))
	for i, r := range t.Refs {
		out[i] = r.ID
	}
	return out
}

// clone is a copy of t whose changes (its fields, appended messages, call
// states, lease, failure) do not reach t. What never changes once set is
// shared: the origin envelope, the offered tools' parameter schemas and the
// calls' argument maps. (It was a JSON round trip of the whole task, which
// with the tools' schemas made it the agent's largest cost per envelope.)
func (t *Task) clone() *Task {
	c := *t
	c.Target = clonePtr(t.Target)
	c.Refs = slices.Clone(t.Refs)
	c.Tools = slices.Clone(t.Tools)
	c.Messages = slices.Clone(t.Messages)
	for i := range c.Messages {
		c.Messages[i].ToolCalls = slices.Clone(c.Messages[i].ToolCalls)
	}
	c.Calls = slices.Clone(t.Calls)
	c.UnknownRefs = slices.Clone(t.UnknownRefs)
	c.Failure = clonePtr(t.Failure)
	c.Lease = clonePtr(t.Lease)
	return &c
}

// clonePtr is a pointer to a copy of *p; nil for nil.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// TaskID is the task of an inbound envelope id: a UUID v5, so a redelivered
// trigger maps to the same task.
func TaskID(envelopeID string) string { return envelope.TaskOf(envelopeID) }

// TaskBucket is the name of the task bucket of a bus prefix.
func TaskBucket(prefix string) string { return prefix + "_tasks" }

// ErrTaskNotFound means the bucket has no such task.
var ErrTaskNotFound = errors.New("task not found")

// errConflict means another process changed the task first.
var errConflict = errors.New("task changed concurrently")

// Tasks is the task bucket. It is safe for concurrent use.
type Tasks struct {
	kv jetstream.KeyValue
}

// OpenTasks creates or opens the task bucket of b; tasks live for ttl.
func OpenTasks(ctx context.Context, b *bus.Bus, ttl time.Duration) (*Tasks, error) {
	kv, err := b.OpenBucket(ctx, TaskBucket(b.Prefix()), "relay agent tasks: origin, LLM messages, pending tool calls, step, tokens, status", ttl)
	if err != nil {
		return nil, err
	}
	return &Tasks{kv: kv}, nil
}

// Get returns the task and its revision.
func (s *Tasks) Get(ctx context.Context, id string) (*Task, uint64, error) {
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("task %s: %w", id, ErrTaskNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get task %s: %w", id, err)
	}
	t, err := decodeTask(e.Value())
	if err != nil {
		return nil, 0, bus.Permanent(fmt.Errorf("decode task %s: %w", id, err))
	}
	return t, e.Revision(), nil
}

// create stores a new task and returns its revision; created is false when
// the task already exists.
func (s *Tasks) create(ctx context.Context, t *Task) (rev uint64, created bool, err error) {
	b, err := encodeTask(t)
	if err != nil {
		return 0, false, bus.Permanent(fmt.Errorf("encode task %s: %w", t.ID, err))
	}
	rev, err = s.kv.Create(ctx, t.ID, b)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("create task %s: %w", t.ID, err)
	}
	return rev, true, nil
}

// update stores t if the task is still at rev; errConflict otherwise.
func (s *Tasks) update(ctx context.Context, t *Task, rev uint64) (uint64, error) {
	t.Updated = time.Now().UTC()
	b, err := encodeTask(t)
	if err != nil {
		return 0, bus.Permanent(fmt.Errorf("encode task %s: %w", t.ID, err))
	}
	n, err := s.kv.Update(ctx, t.ID, b, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, errConflict
	}
	if err != nil {
		return 0, fmt.Errorf("update task %s: %w", t.ID, err)
	}
	return n, nil
}

// decodeTask decodes a stored task. Every step reads the whole task (origin
// envelope, messages, the offered tools' schemas), so it uses goccy/go-json,
// a drop-in codec about 2.5x faster than encoding/json on it
// (BenchmarkTaskCodec); encoding/json is the fallback if goccy refuses.
func decodeTask(b []byte) (*Task, error) {
	var t Task
	if err := gojson.Unmarshal(b, &t); err == nil {
		return &t, nil
	}
	t = Task{}
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// encodeTask encodes a task for the bucket, as decodeTask reads it.
func encodeTask(t *Task) ([]byte, error) { return marshal(t) }
