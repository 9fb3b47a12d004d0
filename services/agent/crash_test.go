package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
)

// storeTask puts a task state straight into the bucket, as a process that
// crashed right after writing it would leave it.
func storeTask(t *testing.T, svc *Service, task *Task) {
	t.Helper()
	if _, ok, err := svc.tasks.create(t.Context(), task); !ok || err != nil {
		t.Fatalf("create task: %v %v", ok, err)
	}
}

func newTestTask(origin *envelope.Envelope) *Task {
	return &Task{ID: TaskID(origin.ID), Status: StatusRunning, Origin: origin, Role: "agent", AgentID: "agent-test",
		Tools:    []OfferedTool{{ToolSpec: ToolSpec{Name: "everything__echo"}, Tool: echoTool.Name}},
		Messages: []Message{{Role: "user", Content: origin.Content}}}
}

// resultMsg is a delivery of the tool result of call id of task.
func resultMsg(task, call string, delivered uint64) *bus.Message {
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleTool, "Echo: hi")
	e.Meta.TaskID = task
	e.ToolCall = &envelope.ToolCall{ID: call, Name: echoTool.Name, Result: map[string]any{"text": "Echo: hi"}}
	return &bus.Message{Envelope: e, Subject: envelope.SubjectToolResult, Delivered: delivered, StreamSeq: 42, Consumer: ConsumerResults}
}

// TestDoneButUnpublishedCompleted: an agent wrote the final answer and died
// before publishing it. The redelivered tool result that drove the last step
// (or any copy of it) publishes the suggestion, once.
func TestDoneButUnpublishedCompleted(t *testing.T) {
	t.Parallel()
	for _, delivered := range []uint64{1, 2} {
		h := setup(t, []reply{say("never asked")})
		svc := h.idle(t, 0)
		task := newTestTask(githubIssueOpened())
		task.Status, task.Step, task.Answer = StatusDone, 2, "The answer that was never published."
		task.Calls = []Call{{ID: "s1-0", LLMID: "call_1", Func: "everything__echo", Tool: echoTool.Name, Done: true}}
		storeTask(t, svc, task)
		for range 2 { // completing twice is harmless
			if err := svc.handleResult(t.Context(), resultMsg(task.ID, "s1-0", delivered)); err != nil {
				t.Fatalf("delivery %d: handleResult: %v", delivered, err)
			}
		}
		if s := h.next(t); s.Content != task.Answer || s.Meta.TaskID != task.ID {
			t.Errorf("delivery %d: got %q for task %s, want the stranded answer", delivered, s.Content, s.Meta.TaskID)
		}
		h.none(t)
		if got, _, _ := svc.tasks.Get(t.Context(), task.ID); !got.FinalPublished {
			t.Errorf("delivery %d: task not marked published", delivered)
		}
		if n := h.llm.count(); n != 0 {
			t.Errorf("delivery %d: %d model calls, want 0", delivered, n)
		}
	}
}

// TestLaterStepCallsCompleted: an agent wrote step 2 with its tool call and
// died before publishing the call. A redelivered result of step 1 (no longer
// a pending call) publishes step 2's call, and the task goes on to answer.
func TestLaterStepCallsCompleted(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{say("Step 2 answered.")})
	task := newTestTask(githubIssueOpened())
	task.Status, task.Step = StatusWaiting, 2
	task.Calls = []Call{{ID: "s2-0", LLMID: "call_2", Func: "everything__echo", Tool: echoTool.Name, Args: map[string]any{"message": "again"}}}
	svc := h.idle(t, 0)
	storeTask(t, svc, task)
	if err := svc.handleResult(t.Context(), resultMsg(task.ID, "s1-0", 2)); err != nil {
		t.Fatalf("handleResult: %v", err)
	}
	testenv.WaitFor(t, 10*time.Second, "step 2's call published", func() bool {
		for _, c := range h.runner.received() {
			if c.Meta.TaskID == task.ID && c.ToolCall.ID == "s2-0" {
				return true
			}
		}
		return false
	})
	var got *envelope.Envelope
	for got == nil || got.Meta.TaskID != task.ID || got.Role != envelope.RoleAssistant || got.ToolCall != nil {
		got = h.next(t)
	}
	if got.Content != "Step 2 answered." {
		t.Errorf("got %q, want the answer after step 2's result", got.Content)
	}
}

// TestLease: a live lease of another delivery is left alone (no model call,
// the handler acks); the holder's own redelivery takes it over at once (its
// handler died); a lease not renewed in time is taken over by anyone.
func TestLease(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{say("Taken over.")})
	svc := h.idle(t, 0)
	holder := &bus.Message{Consumer: ConsumerInbound, StreamSeq: 7, Delivered: 1}
	other := &bus.Message{Consumer: ConsumerResults, StreamSeq: 8, Delivered: 1}

	task := newTestTask(githubIssueOpened())
	task.Lease = &Lease{Owner: "dead-process/1", Holder: leaseHolder(holder), Until: time.Now().Add(time.Hour)}
	storeTask(t, svc, task)
	if err := svc.advance(t.Context(), task.ID, other); err != nil {
		t.Fatalf("advance of another delivery: %v, want nil (left to the holder)", err)
	}
	if n := h.llm.count(); n != 0 {
		t.Fatalf("got %d model calls while leased, want 0", n)
	}
	holder.Delivered = 2
	if err := svc.advance(t.Context(), task.ID, holder); err != nil {
		t.Fatalf("advance of the holder's redelivery: %v", err)
	}
	if s := h.next(t); s.Content != "Taken over." {
		t.Errorf("got %q, want the answer", s.Content)
	}
	if done, _, _ := svc.tasks.Get(t.Context(), task.ID); done.Lease != nil || done.Status != StatusDone {
		t.Errorf("got lease %+v status %s, want no lease and done", done.Lease, done.Status)
	}

	expired := newTestTask(githubComment("@relay-bot again", "octocat"))
	expired.Lease = &Lease{Owner: "dead-process/2", Holder: "agent:99", Until: time.Now().Add(-time.Second)}
	storeTask(t, svc, expired)
	if err := svc.advance(t.Context(), expired.ID, other); err != nil {
		t.Fatalf("advance after the lease ran out: %v", err)
	}
	if s := h.next(t); s.Meta.TaskID != expired.ID {
		t.Errorf("got an envelope of task %s, want %s", s.Meta.TaskID, expired.ID)
	}

	// A lease written by an older agent names no delivery: it is waited for.
	legacy := newTestTask(githubComment("@relay-bot once more", "octocat"))
	legacy.Lease = &Lease{Owner: "old-agent/3", Until: time.Now().Add(time.Minute)}
	storeTask(t, svc, legacy)
	var re *bus.RetryError
	if err := svc.advance(t.Context(), legacy.ID, holder); !errors.As(err, &re) || re.Delay < 50*time.Second {
		t.Errorf("advance of a task under an older agent's lease: %v, want a retry after the lease ends", err)
	}
}

// TestLeaseRenewedWhileThinking: a slow model step keeps its short lease
// alive, so another agent neither thinks too nor waits for it; the answer
// is published once.
func TestLeaseRenewedWhileThinking(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := func(w http.ResponseWriter, r *fakes.ChatRequest) {
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		say("Slow answer.")(w, r)
	}
	h := setup(t, []reply{slow}, withConfig(func(c *Config) { c.LeaseTTL = time.Second }))
	origin := githubIssueOpened()
	h.publish(t, envelope.SubjectInbound+".github.issues", origin)
	svc := h.idle(t, time.Second)
	id := TaskID(origin.ID)
	var first time.Time
	testenv.WaitFor(t, 10*time.Second, "the task leased", func() bool {
		task, _, err := svc.tasks.Get(t.Context(), id)
		if err == nil && task.Lease != nil {
			first = task.Lease.Until
		}
		return !first.IsZero()
	})
	testenv.WaitFor(t, 10*time.Second, "the lease renewed past its first end", func() bool {
		task, _, err := svc.tasks.Get(t.Context(), id)
		return err == nil && task.Lease != nil && task.Lease.Until.After(first.Add(500*time.Millisecond)) && time.Now().After(first)
	})
	// Past the first lease's end, another agent's handler leaves the task alone.
	if err := svc.advance(t.Context(), id, &bus.Message{Consumer: ConsumerInbound, StreamSeq: 1 << 40, Delivered: 1}); err != nil {
		t.Fatalf("advance by another agent: %v", err)
	}
	if n := h.llm.count(); n != 1 {
		t.Errorf("got %d model calls, want 1 (the lease holder's)", n)
	}
	close(release)
	if s := h.next(t); s.Content != "Slow answer." {
		t.Errorf("got %q, want the slow answer", s.Content)
	}
	h.none(t)
}

// TestReplayedTriggerResumesTask: a trigger dead-lettered while its task was
// running (its delivery will not come back, its lease runs out) resumes the
// task when an operator replays it, instead of being taken for a copy of a
// trigger whose own message carries the task on.
func TestReplayedTriggerResumesTask(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{say("Resumed.")})
	svc := h.idle(t, 0)
	origin := githubIssueOpened()
	task := newTestTask(origin)
	task.Lease = &Lease{Owner: "dead-process/1", Holder: ConsumerInbound + ":7", Until: time.Now().Add(-time.Second)}
	storeTask(t, svc, task)
	replay := &bus.Message{Envelope: origin, Subject: "in.github.issues", Consumer: ConsumerInbound, StreamSeq: 99, Delivered: 1,
		Header: nats.Header{bus.HeaderReplayFor: []string{ConsumerInbound}}}
	if err := svc.handleInbound(t.Context(), replay); err != nil {
		t.Fatalf("handleInbound: %v", err)
	}
	if s := h.next(t); s.Content != "Resumed." || s.Meta.TaskID != task.ID {
		t.Errorf("got %q for task %s, want the resumed task's answer", s.Content, s.Meta.TaskID)
	}
}

// TestHandlerLosingTaskToItsOwnMessageWaits: JetStream redelivers a
// message whose handler still runs when the consumer's leader changes (the
// new leader never saw its in-progress acks), so two handlers of one
// delivery can work on a task at once, and the redelivery takes the lease
// over at once. The handler that loses the task to the other (when it
// writes its step, or when it renews its lease while the model thinks) must
// not return, which acknowledges the message, while the task is unfinished:
// the other handler's later failure could not bring the message back (a nak
// after the ack is ignored) and the task would stop for good with no error
// logged. It waits while the other holds the lease, then publishes the
// step the other wrote, or takes the task over when the other died.
func TestHandlerLosingTaskToItsOwnMessageWaits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		leaseTTL time.Duration
		other    string // what the other handler does: "answers" or "dies"
	}{
		{"step written after the takeover, other answers", 0, "answers"},
		{"step written after the takeover, other dies", 0, "dies"},
		{"renewal finds the takeover, other answers", time.Second, "answers"},
		{"renewal finds the takeover, other dies", time.Second, "dies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			slow := func(w http.ResponseWriter, r *fakes.ChatRequest) {
				<-release
				say("Thought by the losing handler.")(w, r)
			}
			h := setup(t, []reply{slow, say("Finished after the other handler died.")})
			var unblock sync.Once
			free := func() { unblock.Do(func() { close(release) }) }
			t.Cleanup(free) // before the model server closes, on a failure too
			svc := h.idle(t, tc.leaseTTL)
			waiting := &signalOn{msg: "task leased by another handler of the same delivery; waiting for it", ch: make(chan struct{}), Handler: svc.log.Handler()}
			svc.log = slog.New(waiting)
			task := newTestTask(githubIssueOpened())
			storeTask(t, svc, task)
			msg := &bus.Message{Consumer: ConsumerInbound, StreamSeq: 7, Delivered: 1}
			done := make(chan error, 1)
			go func() { done <- svc.advance(t.Context(), task.ID, msg) }()
			testenv.WaitFor(t, 10*time.Second, "the first handler asking the model", func() bool { return h.llm.count() == 1 })

			// The message's redelivery, handled by another agent, takes the
			// lease over (its own delivery's: at once).
			cur, rev, err := svc.tasks.Get(t.Context(), task.ID)
			if err != nil || cur.Lease == nil || cur.Lease.Holder != leaseHolder(msg) {
				t.Fatalf("task while the first handler thinks: %+v, %v; want leased for the message", cur, err)
			}
			cur.Lease = &Lease{Owner: "agent-2/1", Holder: leaseHolder(msg), Until: time.Now().Add(time.Minute)}
			if tc.other == "dies" {
				cur.Lease.Until = time.Now().Add(2 * time.Second) // not renewed: it runs out
			}
			if rev, err = svc.tasks.update(t.Context(), cur, rev); err != nil {
				t.Fatalf("take the lease over: %v", err)
			}
			if tc.leaseTTL == 0 {
				free() // the losing handler's step is written after the takeover
			}
			select {
			case <-waiting.ch:
			case err := <-done:
				t.Fatalf("the handler that lost the task to its own message's other handler returned %v while the task was unfinished; "+
					"want it to wait (its message unacknowledged)", err)
			case <-time.After(20 * time.Second):
				t.Fatal("the handler that lost the task neither waited nor returned")
			}
			if tc.leaseTTL != 0 {
				free()
			}
			want := "Finished after the other handler died."
			if tc.other == "answers" {
				want = "Answered by the other handler."
				cur.Lease, cur.Status, cur.Answer = nil, StatusDone, want // its step written, not yet published
				if _, err := svc.tasks.update(t.Context(), cur, rev); err != nil {
					t.Fatalf("the other handler's answer: %v", err)
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("advance of the handler that waited: %v", err)
			}
			if s := h.next(t); s.Content != want || s.Meta.TaskID != task.ID {
				t.Errorf("got %q for task %s, want %q", s.Content, s.Meta.TaskID, want)
			}
			h.none(t)
		})
	}
}

// signalOn closes ch when a record with message msg is logged (whatever
// the level), and passes the records its Handler enables on.
type signalOn struct {
	slog.Handler
	msg  string
	ch   chan struct{}
	once sync.Once
}

func (h *signalOn) Enabled(context.Context, slog.Level) bool { return true }

func (h *signalOn) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ch) })
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// existsAfterWrite is a task bucket whose Create writes the task and then
// says the key exists: a create whose answer was lost, retried, and found
// its own write, when nothing told the caller its outcome was unknown.
type existsAfterWrite struct{ jetstream.KeyValue }

func (k existsAfterWrite) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if _, err := k.KeyValue.Create(ctx, key, value, opts...); err != nil {
		return 0, err
	}
	return 0, jetstream.ErrKeyExists
}

// TestOwnCreateFoundExistingCarriesOn: a trigger's first delivery whose own
// create of the task is reported as "key exists" carries the task on (the
// task's lease names its delivery) instead of taking it for a copy's task
// and acknowledging the trigger, which left the task unanswered for good
// (TestClusterFaults' lost issue).
func TestOwnCreateFoundExistingCarriesOn(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{say("Carried on.")})
	svc := h.idle(t, 0)
	svc.tasks = &Tasks{kv: existsAfterWrite{svc.tasks.kv}}
	origin := githubIssueOpened()
	m := &bus.Message{Envelope: origin, Subject: "in.github.issues", Consumer: ConsumerInbound, StreamSeq: 5, Delivered: 1}
	if err := svc.handleInbound(t.Context(), m); err != nil {
		t.Fatalf("handleInbound: %v", err)
	}
	task, _, err := svc.tasks.Get(t.Context(), TaskID(origin.ID))
	if err != nil || task.Status != StatusDone || !task.FinalPublished {
		t.Fatalf("task after the trigger's delivery: %+v, %v; want done and published", task, err)
	}
	if s := h.next(t); s.Content != "Carried on." || s.Meta.TaskID != task.ID {
		t.Errorf("got %q for task %s, want the answer", s.Content, s.Meta.TaskID)
	}
	h.none(t)
}
