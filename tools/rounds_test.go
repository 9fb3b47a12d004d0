package tools_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

// audits collects a runner's audit records.
type audits struct {
	mu   sync.Mutex
	recs []tools.Record
}

func (a *audits) Audit(_ context.Context, r tools.Record) {
	a.mu.Lock()
	a.recs = append(a.recs, r)
	a.mu.Unlock()
}

func (a *audits) all() []tools.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]tools.Record(nil), a.recs...)
}

func roundsConfig(t *testing.T, url string, store tools.RoundStore, el tools.Elicitor, sink tools.AuditSink) tools.Config {
	return tools.Config{
		Servers:   []mcpconfig.Server{{Name: "deploy", Type: mcpconfig.HTTP, URL: url}},
		AuditPath: filepath.Join(t.TempDir(), "tools.jsonl"),
		Audit:     sink,
		Rounds:    store,
		Elicitor:  el,
	}
}

const roundsThread = "slack:T1/C1/1700000000.000100"

// TestInputRequiredRoundResumesInAnotherRunner: a runner whose call stops
// (its context ends: the process is shutting down) while the person has not
// answered yet keeps the round; the call fails with ErrInterrupted and no
// audit record, and nothing reached the server's effect. A second runner
// sharing the round store resumes the redelivered call: it asks the same
// question (same id and deadline), sends the answers and the request state
// once, and writes the one audit record.
func TestInputRequiredRoundResumesInAnotherRunner(t *testing.T) {
	t.Parallel()
	srv := toolstest.StartInputRequired(t)
	store := &tools.MemoryRounds{}
	asked := make(chan *tools.Question, 1)
	var auditA, auditB audits
	a := toolstest.StartReady(t, roundsConfig(t, srv.URL, store, tools.ElicitorFunc(func(ctx context.Context, q *tools.Question) (*tools.Answer, error) {
		asked <- q
		<-ctx.Done()
		return nil, ctx.Err()
	}), &auditA))
	req := tools.Request{Tool: "deploy.release", Operator: true, CallID: "call-1", Thread: roundsThread, ActsFor: "U1"}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan *tools.Result, 1)
	go func() { done <- a.Call(ctx, req) }()
	first := testenv.Receive(t, asked, 20*time.Second, "the question")
	stop()
	res := testenv.Receive(t, done, 20*time.Second, "the interrupted call")
	if !errors.Is(res.Err, tools.ErrInterrupted) {
		t.Fatalf("interrupted call: got %v, want ErrInterrupted", res.Err)
	}
	if n := len(auditA.all()); n != 0 {
		t.Errorf("the interrupted call wrote %d audit records, want 0", n)
	}
	if round, err := store.LoadRound(t.Context(), "call-1"); err != nil || round == nil || round.State != "state-1" || round.Questions["q0"].ID != first.ID {
		t.Fatalf("stored round %+v, %v; want state-1 with question %s", round, err, first.ID)
	}

	var second recorderQ
	b := toolstest.StartReady(t, roundsConfig(t, srv.URL, store, tools.ElicitorFunc(func(_ context.Context, q *tools.Question) (*tools.Answer, error) {
		second.add(q)
		return &tools.Answer{Action: tools.ElicitAccept, Content: map[string]any{"env": "production"}, By: "U1"}, nil
	}), &auditB))
	req.Resume = true
	res = b.Call(t.Context(), req)
	if res.Err != nil || res.Text != "released state=state-1 q0=accept:production roots=0" {
		t.Fatalf("resumed call: got %q, %v", res.Text, res.Err)
	}
	if qs := second.all(); len(qs) != 1 || qs[0].ID != first.ID || !qs[0].Deadline.Equal(first.Deadline) || !qs[0].Resumable {
		t.Errorf("resumed question %+v, want the first one's id %s and deadline %s", qs, first.ID, first.Deadline)
	}
	if c, e := srv.Calls.Load(), srv.Effects.Load(); c != 2 || e != 1 {
		t.Errorf("server saw %d calls and %d effects, want 2 and 1", c, e)
	}
	if recs := auditB.all(); len(recs) != 1 || recs[0].CallID != "call-1" || recs[0].Status != tools.StatusSuccess {
		t.Errorf("audit records %+v, want one success of call-1", recs)
	}
	if round, err := store.LoadRound(t.Context(), "call-1"); round != nil || err != nil {
		t.Errorf("round left after the call completed: %+v, %v", round, err)
	}
}

// TestInputRequiredTimeoutDeclinesAndCap: questions nobody answers are
// declined at their deadline, and those beyond the per-call cap
// (RELAY_LIMIT_QUESTIONS_PER_CALL) are cancelled unasked with a note.
func TestInputRequiredTimeoutDeclinesAndCap(t *testing.T) {
	t.Parallel()
	srv := toolstest.StartInputRequired(t)
	var asked recorderQ
	cfg := roundsConfig(t, srv.URL, &tools.MemoryRounds{}, tools.ElicitorFunc(func(ctx context.Context, q *tools.Question) (*tools.Answer, error) {
		asked.add(q)
		<-ctx.Done()
		return nil, ctx.Err()
	}), nil)
	cfg.ElicitTimeout = 300 * time.Millisecond
	cfg.MaxQuestions = 2
	r := toolstest.StartReady(t, cfg)
	res := r.Call(t.Context(), tools.Request{Tool: "deploy.release", Args: map[string]any{"questions": 3}, Operator: true,
		CallID: "call-cap", Thread: roundsThread, ActsFor: "U1"})
	if res.Err != nil {
		t.Fatalf("call: %v", res.Err)
	}
	if n := len(asked.all()); n != 2 {
		t.Errorf("asked %d questions, want the cap of 2", n)
	}
	if got := strings.Count(res.Text, "=decline:"); got != 2 || strings.Count(res.Text, "=cancel:") != 1 || !strings.Contains(res.Text, "already asked 2 questions") {
		t.Errorf("result %q: want two declines (timeout) and one cancel with the cap's note", res.Text)
	}
	if e := srv.Effects.Load(); e != 1 {
		t.Errorf("effects %d, want 1", e)
	}
}

type recorderQ struct {
	mu sync.Mutex
	qs []*tools.Question
}

func (r *recorderQ) add(q *tools.Question) {
	r.mu.Lock()
	r.qs = append(r.qs, q)
	r.mu.Unlock()
}

func (r *recorderQ) all() []*tools.Question {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tools.Question(nil), r.qs...)
}
