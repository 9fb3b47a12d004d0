package tools

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// This file is the client side of the two requests a server may send while a
// tool call runs: elicitation/create (ask a human) and sampling/createMessage
// (ask the LLM).
//
// A session is shared by every call to its server, and the protocol does not
// say which call a server request belongs to, so the runner tracks the calls in
// flight on each session: a request arriving while exactly one call runs (or
// several acting for the same thread and person) belongs to it. With the
// 2026-07-28 protocol's multi round-trip results the SDK fulfils the request
// inside the call itself, and the call's context says whose it is.

// The elicitation actions of the MCP specification.
const (
	ElicitAccept  = "accept"
	ElicitDecline = "decline"
	ElicitCancel  = "cancel"
)

// ErrNoHuman is what an Elicitor returns when nobody can be asked for this
// question (the call does not belong to a Slack thread, no approvals worker
// runs, no terminal). The runner then applies the schema's defaults when every
// required field has one (SEP-1034), else declines.
var ErrNoHuman = errors.New("no human can be asked")

// ErrSamplingDisabled is the refusal of a sampling request when no LLM is
// configured.
var ErrSamplingDisabled = errors.New("sampling is not available: no LLM endpoint is configured on the relay (set LLM_BASE_URL and LLM_MODEL)")

// ErrSamplingBudget refuses a sampling request the task's token budget cannot pay for.
var ErrSamplingBudget = errors.New("sampling refused: the task's token budget is used up")

// Question is a server's elicitation/create (form mode) during a call, with
// what the runner knows of the call it belongs to.
type Question struct {
	// ID is unique per question (the runner's process prefix and a counter).
	ID string `json:"id"`
	// Server and Tool name the call; Tool is "" when the question arrived
	// outside any call.
	Server string `json:"server"`
	Tool   string `json:"tool,omitempty"`
	// CallID, TaskID and Thread are the call's (Request).
	CallID string `json:"call_id,omitempty"`
	TaskID string `json:"task_id,omitempty"`
	Thread string `json:"thread,omitempty"`
	// ActsFor is the person the call acts for (a Slack user id: the author of
	// a code block); empty for an agent's task, whose questions an approver
	// answers.
	ActsFor string `json:"acts_for,omitempty"`
	// Message is the server's text for the human.
	Message string `json:"message"`
	// Schema is the requestedSchema: a flat object of string, number,
	// integer, boolean and enum properties.
	Schema map[string]any `json:"requested_schema,omitempty"`
	// Deadline is when the question is declined unanswered.
	Deadline time.Time `json:"deadline"`
	// Resumable: the question belongs to a stored input-required round. A
	// wait for its answer that ends before the deadline for another reason
	// than a cancel (the runner stops) leaves it open: the round's
	// redelivery asks again with the same id and gets the answer.
	Resumable bool `json:"resumable,omitempty"`
}

// Answer is a human's answer to a Question.
type Answer struct {
	// Action is ElicitAccept, ElicitDecline or ElicitCancel.
	Action string `json:"action"`
	// Content holds the accepted values, keyed by property name.
	Content map[string]any `json:"content,omitempty"`
	// By is who answered (a Slack user id), for the log.
	By string `json:"by,omitempty"`
}

// Elicitor puts a Question in front of the human the call acts for and waits
// for the answer until ctx ends (its deadline is Question.Deadline). It
// returns ErrNoHuman when nobody can be asked. Implementations must be safe
// for concurrent use.
type Elicitor interface {
	Elicit(ctx context.Context, q *Question) (*Answer, error)
}

// ElicitorFunc adapts a function to Elicitor.
type ElicitorFunc func(ctx context.Context, q *Question) (*Answer, error)

// Elicit calls f.
func (f ElicitorFunc) Elicit(ctx context.Context, q *Question) (*Answer, error) { return f(ctx, q) }

// SampleMessage is one message of a sampling request.
type SampleMessage struct {
	// Role is "user" or "assistant".
	Role string `json:"role"`
	Text string `json:"text"`
}

// SampleRequest is a server's sampling/createMessage, text only.
type SampleRequest struct {
	System   string          `json:"system,omitempty"`
	Messages []SampleMessage `json:"messages"`
	// MaxTokens bounds the completion: the server's maxTokens, lowered to
	// what the task's budget has left.
	MaxTokens   int      `json:"max_tokens"`
	Temperature *float64 `json:"temperature,omitempty"`
	Stop        []string `json:"stop,omitempty"`
}

// SampleResult is the LLM's completion.
type SampleResult struct {
	Text  string
	Model string
	// Truncated says the completion stopped at MaxTokens.
	Truncated bool
	// PromptTokens and CompletionTokens are the endpoint's usage (0 when it
	// reported none; the runner then estimates).
	PromptTokens, CompletionTokens int
}

// Sampler completes sampling requests on the configured LLM endpoint. The
// agent's OpenAI-compatible client is one (through an adapter in the command
// wiring). Implementations must be safe for concurrent use.
type Sampler interface {
	Sample(ctx context.Context, req *SampleRequest) (*SampleResult, error)
}

// SamplerFunc adapts a function to Sampler.
type SamplerFunc func(ctx context.Context, req *SampleRequest) (*SampleResult, error)

// Sample calls f.
func (f SamplerFunc) Sample(ctx context.Context, req *SampleRequest) (*SampleResult, error) {
	return f(ctx, req)
}

// DefaultMaxQuestions is how many elicitation questions one tool call may
// ask by default.
const DefaultMaxQuestions = 3

// MetaNote is the _meta key of the relay's note on an elicitation result it
// gave without asking anyone (the cap of questions per call).
const MetaNote = "relay/note"

// inflight is one call on a session, as the server requests see it.
type inflight struct {
	req       *Request
	tool      string
	run       *running     // the execution (Cancel)
	tokens    atomic.Int64 // sampling tokens spent, and reserved by requests in flight
	questions atomic.Int64 // elicitation questions asked
	// mcpTask and since are the server's task id and its creation time
	// when the call runs as a task (tasks.go); written and read by the
	// call's own goroutine.
	mcpTask string
	since   time.Time
}

// reserve takes from the call's budget of b tokens what one sampling
// request may spend: its prompt (about prompt tokens) and its answer, whose
// maxTokens it lowers to what is left. Requests of one call that run at once
// so share the budget instead of each seeing all of it; the caller settles
// the reservation with the tokens the request used. It fails when the
// prompt alone is more than is left.
func (f *inflight) reserve(b, prompt int, sr *SampleRequest) (int64, error) {
	for {
		spent := f.tokens.Load()
		left := int64(b) - spent - int64(prompt)
		if left <= 0 {
			return 0, fmt.Errorf("%w (budget %d tokens, %d spent or reserved, prompt about %d)", ErrSamplingBudget, b, spent, prompt)
		}
		answer := int64(sr.MaxTokens)
		if answer <= 0 || answer > left {
			answer = left
		}
		if f.tokens.CompareAndSwap(spent, spent+int64(prompt)+answer) {
			sr.MaxTokens = int(answer)
			return int64(prompt) + answer, nil
		}
	}
}

type callKey struct{}

// callCtx is the context of req's call (Runner.call): its parent with the
// call's timeout, the call in flight (callOf finds it) and the timeout's
// cause, in one allocation.
type callCtx struct {
	context.Context
	f       inflight
	timeout callTimeout
}

// withCall returns the context of req's call of tool under parent, ending
// at timeout, and its cancel; Cancel(run's id) cancels it too.
func withCall(parent context.Context, req *Request, run *running, server, tool string, timeout time.Duration) (*callCtx, context.CancelFunc) {
	c := &callCtx{f: inflight{req: req, tool: tool, run: run}, timeout: callTimeout{limit: timeout, server: server, tool: tool}}
	var cancel context.CancelFunc
	c.Context, cancel = context.WithTimeoutCause(parent, timeout, &c.timeout)
	run.started(c, cancel)
	return c, cancel
}

func (c *callCtx) Value(key any) any {
	if key == (callKey{}) {
		return &c.f
	}
	return c.Context.Value(key)
}

func callOf(ctx context.Context) *inflight {
	f, _ := ctx.Value(callKey{}).(*inflight)
	return f
}

// calls tracks the calls in flight on one conn.
type calls struct {
	mu   sync.Mutex
	list []*inflight
}

func (cs *calls) add(f *inflight) {
	cs.mu.Lock()
	cs.list = append(cs.list, f)
	cs.mu.Unlock()
}

func (cs *calls) remove(f *inflight) {
	cs.mu.Lock()
	if i := slices.Index(cs.list, f); i >= 0 {
		cs.list = slices.Delete(cs.list, i, i+1)
	}
	cs.mu.Unlock()
}

// owner is the call a server request belongs to: the one in ctx, else the
// only call in flight, else the oldest of calls that all act for the same
// thread and person. ambiguous reports calls for different people.
func (cs *calls) owner(ctx context.Context) (f *inflight, ambiguous bool) {
	if f := callOf(ctx); f != nil {
		return f, false
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.list) == 0 {
		return nil, false
	}
	first := cs.list[0]
	for _, g := range cs.list[1:] {
		if g.req.Thread != first.req.Thread || g.req.ActsFor != first.req.ActsFor {
			return nil, true
		}
	}
	return first, false
}

// trackCalls is the session middleware that records tools/call requests in
// flight, so server requests during them find their call.
func (c *conn) trackCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		if f := callOf(ctx); f != nil {
			c.inflight.add(f)
			defer c.inflight.remove(f)
		}
		return next(ctx, method, req)
	}
}

var questionSeq atomic.Uint64

// elicit answers a server's elicitation/create: a human through the
// Elicitor when the call has one, else the schema's defaults (SEP-1034) when
// every required field has one, else decline.
func (c *conn) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	return c.askHuman(ctx, req.Params, nil)
}

// question is the Question of elicitation p during call f (nil: outside
// any call), with a fresh id and no deadline yet.
func (c *conn) question(ctx context.Context, p *mcp.ElicitParams, f *inflight) *Question {
	schema, _ := plainJSON(p.RequestedSchema)
	sm, _ := schema.(map[string]any)
	q := &Question{
		ID:      auditPrefix + "-q" + strconv.FormatUint(questionSeq.Add(1), 10),
		Server:  c.cfg.Name,
		Message: p.Message,
		Schema:  sm,
	}
	if f != nil {
		q.Tool, q.CallID, q.TaskID, q.Thread, q.ActsFor = f.tool, f.req.CallID, f.req.TaskID, f.req.Thread, f.req.ActsFor
	}
	return q
}

// elicitTimeout is how long a question asked now may wait: ElicitTimeout,
// and within the call's deadline, leaving the server time to finish the
// call after a decline.
func (c *conn) elicitTimeout(ctx context.Context) time.Duration {
	timeout := c.r.cfg.ElicitTimeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		timeout = min(timeout, left-min(2*time.Second, left/10))
	}
	return timeout
}

// askHuman answers elicitation p. durable, when not nil, is the question of
// an input-required round (its id and deadline fixed, stored with the
// round): an interruption of its wait is ErrInterrupted, not a decline.
func (c *conn) askHuman(ctx context.Context, p *mcp.ElicitParams, durable *Question) (*mcp.ElicitResult, error) {
	if p.Mode != "" && p.Mode != "form" {
		// Only form mode is declared; a URL would need a browser we do not have.
		return &mcp.ElicitResult{Action: ElicitDecline}, nil
	}
	f, ambiguous := c.inflight.owner(ctx)
	q := durable
	if q == nil {
		q = c.question(ctx, p, f)
	}
	sm := q.Schema
	log := c.log.With("question_id", q.ID)
	if f != nil {
		log = log.With("tool", f.tool, "call_id", f.req.CallID, "thread", f.req.Thread)
	}
	if ambiguous {
		log.Warn("elicitation during calls for different threads; nobody is asked")
	}
	if f != nil {
		if n, limit := f.questions.Add(1), int64(c.r.cfg.MaxQuestions); n > limit {
			if n == limit+1 {
				log.Warn("tool call asked more elicitation questions than allowed; cancelling the rest unasked",
					"limit", limit, "setting", "RELAY_LIMIT_QUESTIONS_PER_CALL")
			}
			note := fmt.Sprintf("not asked: this tool call already asked %d questions, the most the relay allows per call", limit)
			return &mcp.ElicitResult{Action: ElicitCancel, Meta: mcp.Meta{MetaNote: note}}, nil
		}
	}
	if e := c.r.cfg.Elicitor; e != nil && !ambiguous {
		if q.Deadline.IsZero() {
			q.Deadline = time.Now().Add(c.elicitTimeout(ctx)).UTC()
		}
		// Disabling the server cancels the question (hold): the human's
		// message says so and the server gets "cancel".
		sctx, stop := context.WithCancelCause(ctx)
		release := c.hold(stop)
		actx, cancel := context.WithDeadline(sctx, q.Deadline)
		a, err := e.Elicit(actx, q)
		cancel()
		release()
		stopped := context.Cause(sctx)
		stop(nil)
		switch {
		case err == nil:
			if a.Action != ElicitAccept {
				a.Content = nil
			}
			log.Info("elicitation answered", "action", a.Action, "by", a.By)
			return &mcp.ElicitResult{Action: a.Action, Content: a.Content}, nil
		case durable != nil && interrupted(ctx, stopped, q, err):
			log.Info("waiting for the answer interrupted; the round is kept", "err", err)
			return nil, fmt.Errorf("%w: %w", ErrInterrupted, err)
		case ctx.Err() == nil && (errors.Is(stopped, ErrDisabled) || errors.Is(stopped, ErrClosed)):
			log.Info("elicitation cancelled", "reason", stopped)
			return &mcp.ElicitResult{Action: ElicitCancel}, nil
		case errors.Is(err, ErrNoHuman):
			log.Debug("no human to ask", "err", err)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			// A timeout declines, and so does a human we could not reach.
			log.Info("elicitation declined", "err", err)
			return &mcp.ElicitResult{Action: ElicitDecline}, nil
		}
	}
	if content, ok := Defaults(sm); ok {
		log.Info("elicitation answered with the schema's defaults", "fields", len(content))
		return &mcp.ElicitResult{Action: ElicitAccept, Content: content}, nil
	}
	log.Info("elicitation declined: nobody to ask and a required field has no default")
	return &mcp.ElicitResult{Action: ElicitDecline}, nil
}

// interrupted reports whether the wait for durable question q's answer
// ended (with err) for a reason that is neither the question's nor the
// call's: not its deadline, a person, the server's disable or a cancel of
// the call, but the runner stopping or the bus failing. Such a question
// stays open for the call's redelivery.
func interrupted(ctx context.Context, stopped error, q *Question, err error) bool {
	if errors.Is(err, ErrInterrupted) {
		return true
	}
	if errors.Is(err, ErrNoHuman) || errors.Is(stopped, ErrDisabled) || !time.Now().Before(q.Deadline) {
		return false
	}
	if f := callOf(ctx); f != nil && f.run != nil && f.run.cancelCause() != nil {
		return false // cancelled by a person (relay mcp cancel, Slack, the console)
	}
	var ct *callTimeout
	return !errors.As(context.Cause(ctx), &ct)
}

// Defaults returns the default of every property of an elicitation schema
// that has one, and whether that covers every required property (SEP-1034:
// then the form can be accepted as it stands).
func Defaults(schema map[string]any) (map[string]any, bool) {
	props, _ := schema["properties"].(map[string]any)
	content := map[string]any{}
	for name, v := range props {
		p, _ := v.(map[string]any)
		if d, ok := p["default"]; ok && d != nil {
			content[name] = d
		}
	}
	req, _ := schema["required"].([]any)
	for _, r := range req {
		name, _ := r.(string)
		if _, ok := content[name]; !ok {
			return nil, false
		}
	}
	return content, true
}

// sample answers a server's sampling/createMessage on the configured LLM,
// charging the call's task budget.
func (c *conn) sample(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	s := c.r.cfg.Sampler
	if s == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: ErrSamplingDisabled.Error()}
	}
	p := req.Params
	sr := &SampleRequest{System: p.SystemPrompt, MaxTokens: int(p.MaxTokens), Stop: p.StopSequences}
	if p.Temperature != 0 {
		sr.Temperature = &p.Temperature
	}
	chars := len(p.SystemPrompt)
	for _, m := range p.Messages {
		tc, ok := m.Content.(*mcp.TextContent)
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "sampling: only text messages are supported"}
		}
		sr.Messages = append(sr.Messages, SampleMessage{Role: string(m.Role), Text: tc.Text})
		chars += len(tc.Text)
	}
	prompt := chars/4 + 1 // the usual estimate: four characters a token
	f, _ := c.inflight.owner(ctx)
	log := c.log
	var reserved int64
	if f != nil {
		log = log.With("tool", f.tool, "call_id", f.req.CallID, "task_id", f.req.TaskID)
		if b := f.req.TokenBudget; b > 0 {
			var err error
			if reserved, err = f.reserve(b, prompt, sr); err != nil {
				log.Info("sampling refused: token budget used up", "budget", b, "spent", f.tokens.Load())
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
			}
		}
	}
	sctx, stop := context.WithCancelCause(ctx)
	release := c.hold(stop)
	res, err := s.Sample(sctx, sr)
	release()
	stop(nil)
	if err != nil {
		if f != nil {
			f.tokens.Add(-reserved)
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "sampling failed: " + err.Error()}
	}
	used := res.PromptTokens + res.CompletionTokens
	if used == 0 {
		used = prompt + len(res.Text)/4 + 1
	}
	if f != nil {
		f.tokens.Add(int64(used) - reserved)
	}
	log.Info("sampling answered", "model", res.Model, "tokens", used, "max_tokens", sr.MaxTokens)
	out := &mcp.CreateMessageResult{Content: &mcp.TextContent{Text: res.Text}, Model: res.Model, Role: "assistant", StopReason: "endTurn"}
	if res.Truncated {
		out.StopReason = "maxTokens"
	}
	return out, nil
}
