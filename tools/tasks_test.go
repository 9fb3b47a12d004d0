package tools

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// statuses records the task statuses a call reports.
type statuses struct {
	mu   sync.Mutex
	evs  []ProgressEvent
	seen chan ProgressEvent
}

func newStatuses() *statuses { return &statuses{seen: make(chan ProgressEvent, 64)} }

func (s *statuses) add(ev ProgressEvent) {
	s.mu.Lock()
	s.evs = append(s.evs, ev)
	s.mu.Unlock()
	select {
	case s.seen <- ev:
	default:
	}
}

func (s *statuses) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.evs {
		out = append(out, e.Message)
	}
	return out
}

// waitFor returns the first status whose message contains sub.
func (s *statuses) waitFor(t *testing.T, sub string) ProgressEvent {
	t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		select {
		case ev := <-s.seen:
			if strings.Contains(ev.Message, sub) {
				return ev
			}
		case <-timer.C:
			t.Fatalf("no status %q; got %q", sub, s.messages())
		}
	}
}

func everythingHTTP(t *testing.T, name string) mcpconfig.Server {
	return mcpconfig.Server{Name: name, Type: mcpconfig.HTTP, URL: startEverythingHTTP(t), ProtocolVersion: mcpconfig.DefaultProtocolVersion}
}

// TestTaskCall runs server-everything's simulate-research-query (a tool
// whose execution.taskSupport is "required") to its result, on stdio and on
// streamable HTTP, with the task's status messages as progress and one
// audit record naming the task.
func TestTaskCall(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stdio", "http"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := everythingStdio(t, "every")
			if kind == "http" {
				s = everythingHTTP(t, "every")
			}
			r := startRunner(t, fastConfig(t, s))
			st := newStatuses()
			res := r.Call(t.Context(), Request{CallID: "call-" + kind, Tool: "every.simulate-research-query", Operator: true,
				Args: map[string]any{"topic": "relays"}, Progress: st.add})
			if res.Err != nil {
				t.Fatalf("call: %v", res.Err)
			}
			if !strings.Contains(res.Text, "# Research Report: relays") {
				t.Fatalf("got text %q, want the research report", res.Text)
			}
			msgs := strings.Join(st.messages(), "|")
			for _, want := range []string{"Gathering sources", "Generating report"} {
				if !strings.Contains(msgs, want) {
					t.Errorf("statuses %q lack %q", msgs, want)
				}
			}
			if res.MCPTask == "" {
				t.Fatal("result names no task")
			}
			recs := readAudit(t, r)
			if len(recs) != 1 || recs[0].MCPTask != res.MCPTask || recs[0].Status != StatusSuccess {
				t.Fatalf("got audit %+v, want one success record of task %s", recs, res.MCPTask)
			}
		})
	}
}

// TestTaskInputRequired: an ambiguous query stops the task for input; the
// server's elicitation (delivered through tasks/result) reaches the
// person, and the answer shapes the result.
func TestTaskInputRequired(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stdio", "http"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := everythingStdio(t, "every")
			if kind == "http" {
				s = everythingHTTP(t, "every")
			}
			cfg := fastConfig(t, s)
			asked := make(chan *Question, 1)
			cfg.Elicitor = ElicitorFunc(func(_ context.Context, q *Question) (*Answer, error) {
				asked <- q
				return &Answer{Action: ElicitAccept, Content: map[string]any{"interpretation": "snake"}, By: "U1"}, nil
			})
			r := startRunner(t, cfg)
			res := r.Call(t.Context(), Request{CallID: "amb-" + kind, Tool: "every.simulate-research-query", Operator: true, ActsFor: "U1",
				Args: map[string]any{"topic": "python", "ambiguous": true}})
			if res.Err != nil {
				t.Fatalf("call: %v", res.Err)
			}
			q := testenv.Receive(t, asked, time.Second, "the question")
			if q.CallID != "amb-"+kind || q.ActsFor != "U1" {
				t.Errorf("got question of call %q for %q, want amb-%s for U1", q.CallID, q.ActsFor, kind)
			}
			if !strings.Contains(res.Text, "python (snake)") {
				t.Fatalf("got %q, want the clarified report", clipText(res.Text))
			}
		})
	}
}

func clipText(s string) string {
	if len(s) > 300 {
		return s[:300]
	}
	return s
}

// TestTaskCancel: cancelling the execution of a task call sends
// tasks/cancel; the server's task ends cancelled.
func TestTaskCancel(t *testing.T) {
	t.Parallel()
	s := everythingHTTP(t, "every")
	r := startRunner(t, fastConfig(t, s))
	st := newStatuses()
	done := make(chan *Result, 1)
	go func() {
		done <- r.Call(t.Context(), Request{CallID: "cancel-me", Tool: "every.simulate-research-query", Operator: true,
			Args: map[string]any{"topic": "relays"}, Progress: st.add})
	}()
	ev := st.waitFor(t, "Gathering sources")
	if !r.Cancel("cancel-me", "tester") {
		t.Fatal("execution not found")
	}
	res := testenv.Receive(t, done, 30*time.Second, "the cancelled call")
	if res.Status != StatusCancelled || res.CancelledBy != "tester" {
		t.Fatalf("got %s by %q (%v), want cancelled by tester", res.Status, res.CancelledBy, res.Err)
	}
	c := r.conn("every")
	c.mu.Lock()
	session := c.session
	c.mu.Unlock()
	w, err := c.wireFor(session, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := w.call(t.Context(), "tasks/get", map[string]any{"taskId": ev.Task}, nil)
	if err != nil {
		t.Fatalf("tasks/get: %v", err)
	}
	if !strings.Contains(string(raw), `"status":"cancelled"`) {
		t.Fatalf("got task %s, want it cancelled on the server", raw)
	}
}

// TestTaskResumeAfterRestart: a runner stops while its call's task runs on
// a streamable HTTP server (closing its sessions); a second runner, given
// the call again with Resume, polls the same task and completes the call
// once, its audit record counting from the task's creation.
func TestTaskResumeAfterRestart(t *testing.T) {
	t.Parallel()
	s := everythingHTTP(t, "every")
	store := &MemoryTasks{}
	cfgA := fastConfig(t, s)
	cfgA.Tasks = store
	a := startRunner(t, cfgA)
	st := newStatuses()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan *Result, 1)
	req := Request{CallID: "resume-1", Tool: "every.simulate-research-query", Operator: true, Args: map[string]any{"topic": "relays"}, Progress: st.add}
	go func() { done <- a.Call(ctx, req) }()
	first := st.waitFor(t, "Gathering sources")
	stop() // the tool runner's shutdown grace ended
	res := testenv.Receive(t, done, 30*time.Second, "the interrupted call")
	if !errors.Is(res.Err, ErrInterrupted) {
		t.Fatalf("got %v, want ErrInterrupted", res.Err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if recs := readAudit(t, a); len(recs) != 0 {
		t.Fatalf("interrupted call wrote %d audit records, want none", len(recs))
	}
	rec, err := store.LoadTask(t.Context(), "resume-1")
	if err != nil || rec == nil || rec.TaskID != first.Task || rec.Session == "" {
		t.Fatalf("got stored task %+v (%v), want task %s with its session", rec, err, first.Task)
	}

	cfgB := fastConfig(t, s)
	cfgB.Tasks = store
	b := startRunner(t, cfgB)
	stB := newStatuses()
	req.Resume, req.Progress = true, stB.add
	startB := time.Now()
	res = b.Call(t.Context(), req)
	if res.Err != nil {
		t.Fatalf("resumed call: %v", res.Err)
	}
	if res.MCPTask != first.Task || !strings.Contains(res.Text, "# Research Report: relays") {
		t.Fatalf("got task %s and %q, want task %s's report", res.MCPTask, clipText(res.Text), first.Task)
	}
	for _, ev := range stB.evs {
		if ev.Task != first.Task {
			t.Fatalf("resumed call reported task %s, want %s only", ev.Task, first.Task)
		}
	}
	recs := readAudit(t, b)
	if len(recs) != 1 || recs[0].MCPTask != first.Task {
		t.Fatalf("got audit %+v, want one record of task %s", recs, first.Task)
	}
	if !res.since.Equal(rec.Created) || recs[0].DurationMS < float64(startB.Sub(rec.Created))/float64(time.Millisecond) {
		t.Fatalf("audit duration %.0f ms does not count from the task's creation at %s", recs[0].DurationMS, rec.Created)
	}
	if rec, _ := store.LoadTask(t.Context(), "resume-1"); rec != nil {
		t.Fatalf("task record %+v kept after the call completed", rec)
	}
}
