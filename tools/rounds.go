package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Input-required rounds (SEP-2322, protocol 2026-07-28).
//
// A 2026-07-28 server asks its questions by answering tools/call with an
// InputRequiredResult: input requests (elicitation, sampling, roots) and an
// opaque request state. The runner, not the SDK, runs the rounds: it
// stores the round (the call, the state, the input requests and the
// questions it puts to people) in the RoundStore before anyone is asked,
// fulfils the requests, and sends the call again with the answers and the
// state. When the process that asked stops while a person answers, the call
// fails with ErrInterrupted and no audit record; the call's redelivery, in
// whichever runner takes it, finds the round (Request.Resume), attaches to
// the same questions (their ids are fixed by the call and the round, and
// the approvals worker keeps them) and completes the call: one retry with
// the answers, one result, one audit record.

// maxRounds bounds the input-required rounds of one call.
const maxRounds = 10

// ErrInterrupted is a call whose input-required round was interrupted
// (the runner stopped, the bus connection broke) while a person was being
// asked. The round is kept in the RoundStore: a redelivery of the call
// resumes it. Its Result has no audit record.
var ErrInterrupted = errors.New("call interrupted while waiting for a person's answer; it resumes on redelivery")

// Round is a pending input-required round of a call, as the RoundStore
// keeps it.
type Round struct {
	// CallID is the call's (Request.CallID): the store's key.
	CallID string `json:"call_id"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// N counts the rounds of the call, from 1.
	N int `json:"n"`
	// State is the server's opaque requestState, sent back with the answers.
	State string `json:"request_state,omitempty"`
	// Requests are the input requests as the server sent them.
	Requests json.RawMessage `json:"input_requests"`
	// Questions are the questions put to people, keyed by input request id:
	// their ids and deadlines, so a resumed round attaches to the same ones.
	Questions map[string]*Question `json:"questions,omitempty"`
	// Sent: the answers went to the server; an interruption after it
	// leaves the outcome unknown.
	Sent bool      `json:"sent,omitempty"`
	At   time.Time `json:"at"`
}

// RoundStore keeps the pending rounds of calls durably (the tool runner's
// JetStream bucket). Load returns nil and no error when the call has none.
// Implementations must be safe for concurrent use.
type RoundStore interface {
	LoadRound(ctx context.Context, callID string) (*Round, error)
	SaveRound(ctx context.Context, r *Round) error
	DeleteRound(ctx context.Context, callID string) error
}

// MemoryRounds is a RoundStore in memory (tests; a runner alone).
type MemoryRounds struct {
	mu sync.Mutex
	m  map[string][]byte
}

// LoadRound implements RoundStore.
func (m *MemoryRounds) LoadRound(_ context.Context, id string) (*Round, error) {
	m.mu.Lock()
	b, ok := m.m[id]
	m.mu.Unlock()
	if !ok {
		return nil, nil
	}
	var r Round
	return &r, json.Unmarshal(b, &r)
}

// SaveRound implements RoundStore.
func (m *MemoryRounds) SaveRound(_ context.Context, r *Round) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string][]byte{}
	}
	m.m[r.CallID] = b
	return nil
}

// DeleteRound implements RoundStore.
func (m *MemoryRounds) DeleteRound(_ context.Context, id string) error {
	m.mu.Lock()
	delete(m.m, id)
	m.mu.Unlock()
	return nil
}

// rounds runs the call's input-required rounds: res is the server's answer
// to params; it returns the final result. A resumed call (f.req.Resume)
// with a stored round starts from it instead of calling (res is nil then).
func (c *conn) rounds(ctx context.Context, s *mcp.ClientSession, params *mcp.CallToolParams, res *mcp.CallToolResult, round *Round) (*mcp.CallToolResult, error) {
	f := callOf(ctx)
	store := c.r.cfg.Rounds
	durable := store != nil && f != nil && f.req.CallID != ""
	log := c.log
	if f != nil {
		log = log.With("tool", f.tool, "call_id", f.req.CallID)
	}
	forget := func() {
		if !durable {
			return
		}
		if err := store.DeleteRound(context.WithoutCancel(ctx), f.req.CallID); err != nil {
			log.Warn("finished input-required round not deleted; it expires with its bucket's TTL", "err", err)
		}
	}
	for {
		if round == nil {
			if !res.NeedsInput() {
				return res, nil
			}
			n := 1
			if params.RequestState != "" || params.InputResponses != nil {
				n = roundOf(params) + 1
			}
			if n > maxRounds {
				return nil, fmt.Errorf("%w: server %s asked for input %d times in one call (at most %d)", ErrToolFailed, c.cfg.Name, n, maxRounds)
			}
			var err error
			if round, err = c.newRound(ctx, f, params.Name, n, res); err != nil {
				return nil, err
			}
			if durable {
				if err := store.SaveRound(ctx, round); err != nil {
					// The questions are still asked; only a restart loses them.
					log.Warn("input-required round not stored; a runner restart would lose it", "err", err)
				}
			}
		}
		var reqs mcp.InputRequestMap
		if err := json.Unmarshal(round.Requests, &reqs); err != nil {
			return nil, fmt.Errorf("%w: input requests of round %d: %v", ErrToolFailed, round.N, err)
		}
		answers, err := c.fulfil(ctx, f, round, reqs)
		if err != nil {
			if durable && errors.Is(err, ErrInterrupted) {
				return nil, err // the round stays for the redelivery
			}
			forget()
			return nil, err
		}
		if durable {
			round.Sent = true
			if err := store.SaveRound(ctx, round); err != nil {
				log.Warn("input-required round not updated", "err", err)
			}
		}
		next := *params
		next.InputResponses, next.RequestState = answers, round.State
		next.Meta = maps.Clone(params.Meta)
		if next.Meta == nil {
			next.Meta = mcp.Meta{}
		}
		next.Meta[metaRound] = round.N
		log.Info("input-required round answered; sending the call again", "round", round.N, "answers", len(answers))
		res, err = s.CallTool(ctx, &next)
		if err != nil {
			forget()
			return nil, err
		}
		params, round = &next, nil
		if !res.NeedsInput() {
			forget()
			return res, nil
		}
	}
}

// metaRound is the _meta key of a retry's round number (the relay's own;
// servers ignore it).
const metaRound = "relay/round"

func roundOf(p *mcp.CallToolParams) int {
	switch n := p.Meta[metaRound].(type) {
	case int:
		return n
	case float64:
		return int(n)
	}
	return 1
}

// newRound describes round n of the call from the server's
// InputRequiredResult res: the questions get ids fixed by the call and the
// round, and deadlines.
func (c *conn) newRound(ctx context.Context, f *inflight, tool string, n int, res *mcp.CallToolResult) (*Round, error) {
	raw, err := json.Marshal(res.InputRequests)
	if err != nil {
		return nil, fmt.Errorf("%w: input requests: %v", ErrToolFailed, err)
	}
	round := &Round{Server: c.cfg.Name, Tool: tool, N: n, State: res.RequestState, Requests: raw, At: time.Now().UTC()}
	prefix := auditPrefix + "-q" + strconv.FormatUint(questionSeq.Add(1), 10)
	if f != nil && f.req.CallID != "" {
		round.CallID = f.req.CallID
		prefix = "q-" + f.req.CallID + "-r" + strconv.Itoa(n)
	}
	for _, key := range slices.Sorted(maps.Keys(res.InputRequests)) {
		p, ok := res.InputRequests[key].(*mcp.ElicitParams)
		if !ok || (p.Mode != "" && p.Mode != "form") {
			continue
		}
		q := c.question(ctx, p, f)
		q.ID = prefix + "-" + safeKey(key)
		q.Deadline = time.Now().Add(c.elicitTimeout(ctx)).UTC()
		q.Resumable = round.CallID != ""
		if round.Questions == nil {
			round.Questions = map[string]*Question{}
		}
		round.Questions[key] = q
	}
	return round, nil
}

// safeKey keeps the letters, digits, '-' and '_' of an input request id
// (a question id becomes a key of the approvals worker's bucket).
func safeKey(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// fulfil answers the round's input requests: elicitations through the
// person of the call (the round's questions), sampling on the relay's LLM,
// roots empty.
func (c *conn) fulfil(ctx context.Context, f *inflight, round *Round, reqs mcp.InputRequestMap) (mcp.InputResponseMap, error) {
	var mu sync.Mutex
	out := make(mcp.InputResponseMap, len(reqs))
	errs := make([]error, 0, len(reqs))
	var wg sync.WaitGroup
	for key, ir := range reqs {
		wg.Go(func() {
			resp, err := c.fulfilOne(ctx, round.Questions[key], ir)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("input request %q: %w", key, err))
				return
			}
			out[key] = resp
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, ErrInterrupted) {
			return nil, fmt.Errorf("%w: %w", ErrInterrupted, err)
		}
		return nil, err
	}
	return out, nil
}

func (c *conn) fulfilOne(ctx context.Context, q *Question, ir mcp.InputRequest) (mcp.InputResponse, error) {
	switch p := ir.(type) {
	case *mcp.ElicitParams:
		return c.askHuman(ctx, p, q)
	case *mcp.CreateMessageParams:
		return c.sample(ctx, &mcp.CreateMessageRequest{Params: p})
	case *mcp.CreateMessageWithToolsParams:
		cp := &mcp.CreateMessageParams{Meta: p.Meta, MaxTokens: p.MaxTokens, SystemPrompt: p.SystemPrompt, Temperature: p.Temperature, StopSequences: p.StopSequences}
		for _, m := range p.Messages {
			if len(m.Content) != 1 {
				return nil, fmt.Errorf("sampling: only single text content messages are supported")
			}
			cp.Messages = append(cp.Messages, &mcp.SamplingMessage{Role: m.Role, Content: m.Content[0]})
		}
		return c.sample(ctx, &mcp.CreateMessageRequest{Params: cp})
	case *mcp.ListRootsParams:
		// The relay exposes no filesystem roots to servers.
		return &mcp.ListRootsResult{Roots: []*mcp.Root{}}, nil
	}
	return nil, fmt.Errorf("unknown input request type %T", ir)
}

// resumeRound is the stored round of a resumed call, or nil to call
// afresh. A round whose answers were already sent is not sent again for a
// tool that is not read-only or idempotent: that retry may have run.
func (c *conn) resumeRound(ctx context.Context, entry *toolEntry) (*Round, error) {
	f := callOf(ctx)
	store := c.r.cfg.Rounds
	if store == nil || f == nil || !f.req.Resume || f.req.CallID == "" {
		return nil, nil
	}
	round, err := store.LoadRound(ctx, f.req.CallID)
	if err != nil || round == nil {
		return nil, err
	}
	if round.Sent && !entry.safe() {
		if err := store.DeleteRound(ctx, round.CallID); err != nil {
			c.log.Warn("interrupted input-required round not deleted", "call_id", round.CallID, "err", err)
		}
		return nil, fmt.Errorf("%w: an earlier attempt was interrupted after the answers to round %d were sent; it may have run, and the tool is not read-only or idempotent, so it was not repeated",
			ErrToolFailed, round.N)
	}
	// The questions asked before count against the call's cap again.
	c.log.Info("resuming an input-required round", "call_id", round.CallID, "round", round.N, "questions", len(round.Questions))
	return round, nil
}
