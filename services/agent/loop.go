package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/memory"
)

// handleInbound starts (or resumes) the task of a triggering envelope.
func (s *Service) handleInbound(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	if ran, err := s.handleRun(ctx, m); ran {
		return err
	}
	if switchCommand(e) {
		return nil // `/relay stop|resume`: the approvals worker's
	}
	digest := isDigest(e)
	ok, why := s.match.Match(e)
	if digest {
		ok, why = true, "" // the agent's own digest of triggers over a limit
	}
	if ok && s.tasks == nil {
		ok, why = false, "no model configured"
	}
	if !ok {
		if why != SkipNoTrigger && why != SkipNotUser {
			s.log.Debug("inbound envelope starts no task", "envelope_id", e.ID, "subject", m.Subject, "reason", why)
		}
		return nil
	}
	id := TaskID(e.ID)
	log := s.log.With("task_id", id, "envelope_id", e.ID, "thread", e.Meta.Thread)
	// A first delivery is counted against its sources before anything else:
	// a trigger of a source over its limit (a flood) then costs no read of
	// the task bucket, only memory, and the consumer's slots stay free for
	// the other sources' triggers. A redelivered one may have its task
	// already: that is looked up first.
	admitted := digest
	if !admitted && !redelivered(m) {
		if deferred, err := s.admitOrDefer(ctx, e, log); deferred || err != nil {
			return err
		}
		admitted = true
	}
	if t, _, err := s.tasks.Get(ctx, id); err == nil {
		if !redelivered(m) {
			// Another copy of the trigger (a webhook redelivered after the
			// bus's de-duplication window) made the task; its message
			// carries the task on. What the task says is unpublished is
			// published by whoever touches it next.
			log.Info("trigger seen again; its task exists")
			return s.complete(ctx, t, m)
		}
		log.Info("trigger redelivered; resuming its task", "delivered", m.Delivered)
		return s.advance(ctx, id, m)
	} else if !errors.Is(err, ErrTaskNotFound) {
		return err
	}
	if !admitted {
		if deferred, err := s.admitOrDefer(ctx, e, log); deferred || err != nil {
			return err
		}
	}
	t := s.newTask(ctx, id, e, log)
	owner := s.newOwner()
	t.Lease = s.leaseFor(owner, m) // created leased: the first step is this handler's
	rev, created, err := s.tasks.create(ctx, t)
	if err != nil {
		return err
	}
	if !created {
		// A copy of the trigger created it a moment ago: advance leaves a
		// task leased to that copy's delivery to it. Or this handler's own
		// write created it and its answer was lost: the lease names this
		// delivery, and advance carries the task on. (Returning here on a
		// first delivery acknowledged the trigger of a task nobody would
		// carry on.)
		return s.advance(ctx, id, m)
	}
	s.metrics.started.Inc()
	log.Info("task started", "subject", m.Subject, "tools", len(t.Tools), "refs", len(t.Refs))
	return s.advanceFrom(ctx, t, rev, m, owner)
}

// handleResult records a tool result (tool.result or tool.failed) and, once
// every call of the step is answered, continues the task.
func (s *Service) handleResult(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	if st, ok := runStateOf(e); ok {
		return s.handleRunResult(ctx, e, st)
	}
	if e.ToolCall == nil || e.ToolCall.ID == "" || e.Meta.TaskID == "" || s.tasks == nil {
		return nil
	}
	e = s.wholeResult(ctx, e)
	for range 20 {
		t, rev, err := s.tasks.Get(ctx, e.Meta.TaskID)
		if errors.Is(err, ErrTaskNotFound) {
			return nil // not an agent task (a hook's call, or expired)
		}
		if err != nil {
			return err
		}
		if t.final() {
			// The result that drove the last step, redelivered: the answer
			// may still be unpublished (its publisher crashed).
			return s.complete(ctx, t, m)
		}
		i := callIndex(t, e.ToolCall.ID)
		if i < 0 {
			s.log.Debug("result of no pending call (an earlier step, or redelivered)", "task_id", t.ID, "call_id", e.ToolCall.ID)
			return s.complete(ctx, t, m) // a later step's calls may be unpublished
		}
		if t.Calls[i].Done {
			if !redelivered(m) {
				return s.complete(ctx, t, m) // another copy of a recorded result
			}
			return s.advance(ctx, t.ID, m) // our redelivery: make sure the task moved on
		}
		n := t.clone()
		c := &n.Calls[i]
		c.Done = true
		c.Output, c.Failed = s.toolOutput(e, m.Subject == envelope.SubjectToolFailed)
		n.Tokens += samplingTokens(e) // the server's sampling requests spent the task's budget too
		owner := ""
		if n.answered() {
			n.Status = StatusRunning
			if n.Lease == nil { // the next step is this handler's: lease it in the same update
				owner = s.newOwner()
				n.Lease = s.leaseFor(owner, m)
			}
		}
		nrev, err := s.tasks.update(ctx, n, rev)
		if errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return err
		}
		s.log.Debug("tool result recorded", "task_id", t.ID, "call_id", c.ID, "tool", c.Tool, "failed", c.Failed)
		if n.Status == StatusRunning {
			return s.advanceFrom(ctx, n, nrev, m, owner)
		}
		return nil
	}
	return fmt.Errorf("record result %s of task %s: too many concurrent changes", e.ToolCall.ID, e.Meta.TaskID)
}

// redelivered reports whether m may be the message whose handler worked for
// the task before and died or failed: a redelivery (also one the bus made
// in-process, m.Retried, after the bus was unavailable), or a dead letter an operator
// replayed (its delivery will not come back). Otherwise m is a copy of a
// message another handler carries on.
func redelivered(m *bus.Message) bool {
	return m.Delivered > 1 || m.Retried > 0 || m.Header.Get(bus.HeaderReplayFor) != ""
}

func callIndex(t *Task, id string) int {
	for i, c := range t.Calls {
		if c.ID == id {
			return i
		}
	}
	return -1
}

// unpublished reports whether the task's state says something is done but
// not yet on the bus: the answer or notice of a final task, or the current
// step's tool calls.
func (t *Task) unpublished() bool {
	if t.final() {
		return !t.FinalPublished
	}
	return t.Status == StatusWaiting && !t.answered() && !t.CallsPublished
}

// complete publishes what t (as just read) says is unpublished, for a
// message that does not itself continue the task. Publishes carry message ids
// derived from the task, so completing twice is harmless.
func (s *Service) complete(ctx context.Context, t *Task, m *bus.Message) error {
	if !t.unpublished() {
		return nil
	}
	return s.advance(ctx, t.ID, m)
}

// advance moves a task as far as it can go now: publish what its state says
// is unpublished, or ask the model for the next step. Every state change is
// a revision-checked update. Asking the model takes a lease on the task
// first, so one process at a time thinks for it. The lease names the message
// whose handler holds it and is renewed while the model is asked; a handler
// that finds another message's live lease leaves the task to it (that
// message is redelivered if its handler dies, and its redelivery takes the
// lease over at once), and a lease that was not renewed for LeaseTTL is
// taken over by anyone. After losing an update to another writer, advance
// still publishes but leaves thinking to that writer. Once the step's calls
// or the final envelope are published, the task is left to the results (or
// is over).
func (s *Service) advance(ctx context.Context, id string, m *bus.Message) error {
	return s.advanceFrom(ctx, &Task{ID: id}, 0, m, "")
}

// advanceFrom is advance starting from a state of the task this handler
// wrote itself at rev (rev 0: read it first). A state the handler just wrote
// is what reading it back would return unless another writer came in
// between, and then the next revision-checked update conflicts and the task
// is read again: so after each of its own writes advance goes on from what
// it wrote rather than reading the task back. owner names the lease the
// caller already wrote into that state ("" for none): the step is thought
// under it without taking the lease again.
func (s *Service) advanceFrom(ctx context.Context, known *Task, rev uint64, m *bus.Message, owner string) error {
	id := known.ID
	conflicted := false
	holder := leaseHolder(m)
	if owner == "" {
		owner = s.newOwner()
	}
	for range 4*s.cfg.MaxSteps + 20 {
		t := known
		if rev == 0 {
			var err error
			if t, rev, err = s.tasks.Get(ctx, id); err != nil {
				return err
			}
		}
		var next *Task
		handedOver := false
		switch {
		case t.final() || t.Status == StatusWaiting && !t.answered():
			if !t.unpublished() {
				return nil // over, or the results will continue the task
			}
			var err error
			if next, err = s.publishPending(ctx, t); err != nil {
				return err
			}
			handedOver = true
		case conflicted:
			if t.Lease != nil && t.Lease.Holder != holder {
				return nil // the writer that moved the task on continues it
			}
			// Another handler of this same delivery moved it on, or it is
			// left running without a lease: see sameDelivery.
			if err := s.sameDelivery(ctx, t, owner); err != nil {
				return err
			}
			conflicted, rev = false, 0
			continue
		case t.Lease != nil && t.Lease.Holder == "" && time.Now().Before(t.Lease.Until):
			// A lease of an older agent, which names no delivery: wait for it.
			return bus.RetryAfter(fmt.Errorf("task %s: leased by %s", id, t.Lease.Owner), time.Until(t.Lease.Until)+time.Second)
		case t.Lease != nil && t.Lease.Holder != holder && time.Now().Before(t.Lease.Until):
			// Another handler thinks for the task; its message carries it.
			s.log.Debug("task leased by another handler; leaving it to that one", "task_id", id, "lease_owner", t.Lease.Owner)
			return nil
		default:
			leased, lrev, err := s.takeLease(ctx, t, rev, owner, m)
			if errors.Is(err, errConflict) {
				conflicted, rev = true, 0
				continue
			} else if err != nil {
				return err
			}
			var lost bool
			next, rev, lost, err = s.thinkLeased(ctx, leased, lrev)
			if lost {
				s.log.Warn("lease lost while thinking; the new holder continues the task", "task_id", id)
				conflicted, rev = true, 0
				continue
			}
			if err != nil {
				s.release(leased, rev)
				return err
			}
			next.Lease = nil
		}
		nrev, err := s.tasks.update(ctx, next, rev)
		if errors.Is(err, errConflict) {
			conflicted, rev = true, 0
			continue
		} else if err != nil {
			return err
		}
		if next.final() && !t.final() {
			s.finished(next)
		}
		if handedOver {
			return nil
		}
		known, rev = next, nrev
	}
	return fmt.Errorf("advance task %s: no progress after many attempts", id)
}

// sameDelivery is what a handler does when another writer moved its task
// on (t, as read after) and the task's lease does not name another message:
// the writer is another handler of this same delivery (JetStream redelivers
// a message whose handler still runs when the consumer's leader changes,
// and the redelivery takes the lease over at once), or the task was left
// running without a lease. Leaving the task to that handler by returning
// nil would acknowledge the message, and that handler's later failure could
// not bring it back (a nak after the ack is ignored): the task would stop
// for good, with no error anywhere. Taking the lease back would fight it.
// So the handler waits, its delivery unacknowledged, while the other
// handler holds a live lease, and then advances the task again: it finds the
// step done (and publishes what is unpublished, or leaves the task to the
// results), or the lease run out (the other handler died) and takes it over.
func (s *Service) sameDelivery(ctx context.Context, t *Task, owner string) error {
	if t.Lease == nil || t.Lease.Owner == owner {
		return nil
	}
	s.log.Info("task leased by another handler of the same delivery; waiting for it", "task_id", t.ID, "lease_owner", t.Lease.Owner)
	tick := time.NewTicker(max(s.cfg.LeaseTTL/100, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		now, _, err := s.tasks.Get(ctx, t.ID)
		if err != nil {
			return err
		}
		if now.Lease == nil || now.Lease.Owner != t.Lease.Owner || !time.Now().Before(now.Lease.Until) {
			return nil
		}
	}
}

// takeLease leases the task (at rev) to owner for m's delivery and returns
// the leased state and its revision; a state already leased to owner is
// returned as it is.
func (s *Service) takeLease(ctx context.Context, t *Task, rev uint64, owner string, m *bus.Message) (*Task, uint64, error) {
	if t.Lease != nil && t.Lease.Owner == owner {
		return t, rev, nil
	}
	if t.Lease != nil {
		s.log.Info("taking over the task's lease", "task_id", t.ID, "lease_owner", t.Lease.Owner,
			"own_redelivery", t.Lease.Holder == leaseHolder(m))
	}
	leased := t.clone()
	leased.Lease = s.leaseFor(owner, m)
	lrev, err := s.tasks.update(ctx, leased, rev)
	return leased, lrev, err
}

// newOwner names one advance of a task: this agent instance and a counter.
func (s *Service) newOwner() string { return s.instance + "/" + strconv.FormatUint(s.seq.Add(1), 10) }

// leaseFor is a fresh lease for owner, working for m's delivery.
func (s *Service) leaseFor(owner string, m *bus.Message) *Lease {
	return &Lease{Owner: owner, Holder: leaseHolder(m), Until: time.Now().Add(s.cfg.LeaseTTL)}
}

// publishPending publishes what t says is unpublished (its final envelope,
// or its step's calls) and returns the state that records it.
func (s *Service) publishPending(ctx context.Context, t *Task) (*Task, error) {
	next := t.clone()
	if t.final() {
		next.FinalPublished = true
		return next, s.publishFinal(ctx, t)
	}
	next.CallsPublished = true
	return next, s.publishCalls(ctx, t)
}

// leaseHolder names the delivery a handler works for: its consumer and
// stream sequence, the same across redeliveries.
func leaseHolder(m *bus.Message) string {
	if m == nil {
		return ""
	}
	return m.Consumer + ":" + strconv.FormatUint(m.StreamSeq, 10)
}

// thinkLeased asks the model for the next step of a task leased at rev,
// renewing the lease every LeaseTTL/3 meanwhile. It returns the next state,
// the task's revision after the last renewal, and lost when another process
// changed the task (it took over a lease that had run out): the step is then
// abandoned.
func (s *Service) thinkLeased(ctx context.Context, leased *Task, rev uint64) (*Task, uint64, bool, error) {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		cur  = rev
		lost bool
	)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(s.cfg.LeaseTTL / 3)
		defer tick.Stop()
		renewed := leased.clone()
		for {
			select {
			case <-stop:
				return
			case <-tctx.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			r := cur
			mu.Unlock()
			renewed.Lease.Until = time.Now().Add(s.cfg.LeaseTTL)
			nr, err := s.tasks.update(ctx, renewed, r)
			if errors.Is(err, errConflict) {
				mu.Lock()
				lost = true
				mu.Unlock()
				cancel()
				return
			}
			if err != nil {
				s.log.Warn("lease not renewed; retrying", "task_id", leased.ID, "err", err)
				continue
			}
			mu.Lock()
			cur = nr
			mu.Unlock()
		}
	}()
	next, err := s.think(tctx, leased)
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	return next, cur, lost, err
}

// release drops this process's lease after an interrupted step (shutdown),
// so the redelivered message can continue at once.
func (s *Service) release(t *Task, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	t.Lease = nil
	if _, err := s.tasks.update(ctx, t, rev); err != nil && !errors.Is(err, errConflict) {
		s.log.Warn("lease not released; the task continues when it expires", "task_id", t.ID, "err", err)
	}
}

func (s *Service) finished(t *Task) {
	s.metrics.steps.Observe(float64(t.Step))
	log := s.log.With("task_id", t.ID, "thread", t.Origin.Meta.Thread, "steps", t.Step, "tokens", t.Tokens)
	if t.Status == StatusDone {
		s.metrics.completed.Inc()
		log.Info("task answered", "refs", len(t.Refs), "unknown_refs", len(t.UnknownRefs))
		return
	}
	s.metrics.failed.WithLabelValues(t.Failure.Kind).Inc()
	log.Warn("task failed", "kind", t.Failure.Kind, "reason", t.Failure.Reason)
}

// think asks the model for the next step and returns the task's next state.
// Only a cancelled ctx (shutdown) is an error: the message is redelivered.
func (s *Service) think(ctx context.Context, t *Task) (*Task, error) {
	n := t.clone()
	n.Status = StatusRunning
	for _, c := range n.Calls {
		n.Messages = append(n.Messages, Message{Role: "tool", ToolCallID: c.LLMID, Content: c.Output})
	}
	n.Calls, n.CallsPublished = nil, false
	if n.Step >= s.cfg.MaxSteps {
		return fail(n, FailStepLimit, fmt.Sprintf("the step limit (%d model calls) was reached before an answer", s.cfg.MaxSteps)), nil
	}
	if n.Tokens >= s.cfg.TokenBudget {
		return fail(n, FailTokenBudget, fmt.Sprintf("the token budget (%d) was used up (%d) before an answer", s.cfg.TokenBudget, n.Tokens)), nil
	}
	specs := make([]ToolSpec, len(n.Tools))
	for i, ot := range n.Tools {
		specs[i] = ot.ToolSpec
	}
	start := time.Now()
	comp, err := s.askModel(ctx, n.Messages, specs)
	s.publishStep(ctx, n, comp, err, time.Since(start))
	if err != nil {
		if ctx.Err() != nil {
			s.metrics.llm.WithLabelValues("cancelled").Observe(time.Since(start).Seconds())
			return nil, fmt.Errorf("task %s step %d: %w", t.ID, n.Step+1, ctx.Err())
		}
		s.metrics.llm.WithLabelValues("error").Observe(time.Since(start).Seconds())
		return fail(n, FailLLMUnavailable, err.Error()), nil
	}
	s.metrics.llm.WithLabelValues("ok").Observe(time.Since(start).Seconds())
	n.Step++
	used := comp.PromptTokens + comp.CompletionTokens
	if used == 0 {
		used = estimateTokens(n.Messages) + memory.Tokens(comp.Content)
	}
	n.Tokens += used

	calls := comp.ToolCalls
	if len(calls) == 0 {
		calls = ContentToolCalls(comp.Content, func(name string) bool { return n.tool(name) != nil })
		if len(calls) > 0 {
			comp.Content = ""
		}
	}
	if len(calls) == 0 {
		answer := strings.TrimSpace(comp.Content)
		if answer == "" {
			return fail(n, FailBadAnswer, "the model answered with neither text nor tool calls"), nil
		}
		n.Messages = append(n.Messages, Message{Role: "assistant", Content: answer})
		n.Answer = answer
		n.UnknownRefs = UnknownRefs(answer, n.refIDs())
		n.Status = StatusDone
		return n, nil
	}
	if n.Step >= s.cfg.MaxSteps {
		return fail(n, FailStepLimit, fmt.Sprintf("the step limit (%d model calls) was reached and the model still calls tools", s.cfg.MaxSteps)), nil
	}
	msg := Message{Role: "assistant", Content: comp.Content}
	for i := range calls {
		if calls[i].ID == "" {
			calls[i].ID = fmt.Sprintf("call_%d_%d", n.Step, i)
		}
		msg.ToolCalls = append(msg.ToolCalls, calls[i])
	}
	n.Messages = append(n.Messages, msg)
	pending := false
	for i, lc := range calls {
		c := Call{ID: fmt.Sprintf("s%d-%d", n.Step, i), LLMID: lc.ID, Func: lc.Name}
		ot := n.tool(lc.Name)
		args, aerr := ParseArgs(lc.Arguments)
		switch {
		case i >= MaxCallsPerStep:
			c.Local, c.Done, c.Failed = true, true, true
			c.Output = fmt.Sprintf("error: at most %d tool calls run per step; call it again in the next step if you still need it", MaxCallsPerStep)
		case ot == nil:
			c.Local, c.Done, c.Failed = true, true, true
			c.Output = fmt.Sprintf("error: there is no tool %q; the tools are: %s", lc.Name, n.toolNames())
		case aerr != nil:
			c.Tool, c.Local, c.Done, c.Failed = ot.Tool, true, true, true
			c.Output = "error: the arguments are not a JSON object: " + aerr.Error()
		case ot.PerUser && !n.hasSlackThread():
			c.Tool, c.Args, c.Local, c.Done, c.Failed = ot.Tool, args, true, true, true
			c.Output = noApprovalThread(ot.Tool)
		case ot.Tool == ToolRetrieveDocs:
			c.Tool, c.Args, c.Local, c.Done = ot.Tool, args, true, true
			c.Output, c.Failed = s.retrieveDocs(ctx, n, args)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		default:
			c.Tool, c.Args, c.Approval = ot.Tool, args, ot.PerUser
			pending = true
		}
		n.Calls = append(n.Calls, c)
	}
	if pending {
		n.Status = StatusWaiting
	}
	return n, nil
}

// MaxCallsPerStep bounds the tool calls run for one model answer; further
// calls are answered with an error the model can act on.
const MaxCallsPerStep = 8

func fail(t *Task, kind, reason string) *Task {
	t.Status = StatusFailed
	t.Failure = &Failure{Kind: kind, Reason: reason}
	return t
}

// tool finds an offered function by its name, or by the tool's own
// "<server>.<tool>" name (some models echo that).
func (t *Task) tool(name string) *OfferedTool {
	for i := range t.Tools {
		if t.Tools[i].Name == name {
			return &t.Tools[i]
		}
	}
	for i := range t.Tools {
		if t.Tools[i].Tool == name {
			return &t.Tools[i]
		}
	}
	return nil
}

func (t *Task) toolNames() string {
	names := make([]string, len(t.Tools))
	for i, ot := range t.Tools {
		names[i] = ot.Name
	}
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ", ")
}

func estimateTokens(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += memory.Tokens(m.Content) + 4
		for _, c := range m.ToolCalls {
			n += memory.Tokens(c.Name + c.Arguments)
		}
	}
	return n
}

// retrieveDocs answers retrieve_docs from memory and adds the refs to the task.
func (s *Service) retrieveDocs(ctx context.Context, t *Task, args map[string]any) (string, bool) {
	if s.cfg.Memory == nil {
		return "error: document retrieval is not available", true
	}
	q, _ := args["query"].(string)
	if strings.TrimSpace(q) == "" {
		return `error: retrieve_docs needs a "query" string`, true
	}
	k := 5
	if f, ok := args["k"].(float64); ok && f >= 1 {
		k = min(int(f), 20)
	}
	refs, err := s.cfg.Memory.RetrieveDocs(ctx, q, k)
	if err != nil {
		s.log.Warn("retrieve_docs failed", "task_id", t.ID, "err", err)
		return "error: document retrieval failed: " + err.Error(), true
	}
	if len(refs) == 0 {
		return "no documents found", false
	}
	var b strings.Builder
	b.WriteString("Documents (cite each one you use as [[ref:ID]]):\n")
	for _, r := range refs {
		t.addRef(Ref{ID: r.ID, URI: r.URI, Text: r.Text})
		writeRef(&b, len(t.Refs), Ref{ID: r.ID, URI: r.URI, Text: r.Text}, s.cfg.MaxToolOutput/len(refs))
	}
	return b.String(), false
}

func (t *Task) addRef(r Ref) {
	for _, have := range t.Refs {
		if have.ID == r.ID {
			return
		}
	}
	t.Refs = append(t.Refs, r)
}

func writeRef(b *strings.Builder, n int, r Ref, limit int) {
	fmt.Fprintf(b, "[%d] [[ref:%s]]", n, r.ID)
	if r.URI != "" {
		b.WriteString(" " + r.URI)
	}
	b.WriteString("\n" + clip.Mark(r.Text, max(limit, 200), truncated) + "\n")
}

// toolOutput is what the model sees of a tool envelope: its text, structured
// result or content, or "error: ..." for a failure.
func (s *Service) toolOutput(e *envelope.Envelope, failedSubject bool) (string, bool) {
	r := e.ToolCall.Result
	errText, _ := r["error"].(string)
	text, _ := r["text"].(string)
	if errText != "" || failedSubject {
		if errText == "" {
			errText = e.Content
		}
		out := "error: " + errText
		if text != "" {
			out += "\n" + text
		}
		return clip.Mark(out, s.cfg.MaxToolOutput, truncated), true
	}
	if text == "" {
		for _, k := range []string{"structured", "content"} {
			if v, ok := r[k]; ok && v != nil {
				b, _ := json.Marshal(v)
				text = string(b)
				break
			}
		}
	}
	if text == "" {
		text = e.Content
	}
	return clip.Mark(text, s.cfg.MaxToolOutput, truncated), false
}

// truncated marks a text cut to the model's budget.
const truncated = "\n… (truncated)"

// publishCalls puts the step's pending MCP calls on tool.call. Each call's
// meta.budget gives it an even share of the tokens the task has left, which
// the tool runner lets the server's sampling requests spend: calls of one
// step run at once, and each seeing the whole remainder could overspend it.
func (s *Service) publishCalls(ctx context.Context, t *Task) error {
	var pending []Call
	for _, c := range t.Calls {
		if !c.Local && !c.Done {
			pending = append(pending, c)
		}
	}
	budget := callBudget(t.Tokens, s.cfg.TokenBudget, len(pending))
	for _, c := range pending {
		e := callEnvelope(t, c, budget)
		subject, msgID := envelope.SubjectToolCall, t.ID+":"+c.ID
		if c.Approval {
			// A per-user server's call waits for a person in Slack; the
			// approvals worker publishes the envelope on tool.call once
			// approved (toolstep.go).
			subject, msgID = SubjectToolStep, "toolstep:"+t.ID+":"+c.ID
			stepEnvelope(t, e)
		}
		if _, err := s.bus.Publish(ctx, subject, e, bus.WithMsgID(msgID)); err != nil {
			if errors.Is(err, bus.ErrInvalidEnvelope) {
				return bus.Permanent(fmt.Errorf("task %s call %s: %w", t.ID, c.ID, err))
			}
			return fmt.Errorf("task %s call %s: %w", t.ID, c.ID, err)
		}
		s.log.Debug("tool call published", "task_id", t.ID, "call_id", c.ID, "tool", c.Tool, "subject", subject)
	}
	return nil
}

// callEnvelope is the tool.call envelope of call c of t's step, with budget.
func callEnvelope(t *Task, c Call, budget envelope.Budget) *envelope.Envelope {
	e := t.Origin.Reply(t.Origin.Channel, envelope.RoleAssistant, "call "+c.Tool)
	e.ID = envelope.DerivedID("relay-call:" + t.ID + ":" + c.ID)
	e.Context = nil
	e.Meta.TaskID = t.ID
	e.Meta.Thread = t.Origin.Meta.Thread
	e.Meta.Set("agent", map[string]any{"id": t.AgentID, "role": t.Role})
	e.ToolCall = &envelope.ToolCall{ID: c.ID, Name: c.Tool, Args: c.Args}
	e.Meta.Budget = &budget
	return e
}

// callBudget is the meta.budget of each of n calls of a step when the task
// has spent spent of limit tokens: tokens as the task's tally (as on the
// agent's other envelopes), and a limit that leaves the call its share,
// limit - tokens, of what is left (at least one token: a task that has
// nothing left ends before it calls a tool).
func callBudget(spent, limit, n int) envelope.Budget {
	share := max(limit-spent, 0) / max(n, 1)
	return envelope.Budget{Tokens: spent, Limit: spent + max(share, 1)}
}

// publishFinal puts the suggestion (done) or the notice (failed) on the bus.
func (s *Service) publishFinal(ctx context.Context, t *Task) error {
	var (
		e       *envelope.Envelope
		subject string
		msgID   string
	)
	if t.Status == StatusDone {
		e, subject, msgID = s.suggestion(t), SubjectSuggestion, "suggestion:"+t.ID
	} else {
		e, subject, msgID = s.notice(t), SubjectNotice, "notice:"+t.ID
	}
	if _, err := s.bus.Publish(ctx, subject, e, bus.WithMsgID(msgID)); err != nil {
		if errors.Is(err, bus.ErrInvalidEnvelope) {
			return bus.Permanent(fmt.Errorf("task %s: %w", t.ID, err))
		}
		return fmt.Errorf("task %s: %w", t.ID, err)
	}
	return nil
}

func (s *Service) base(t *Task, name string, role envelope.Role, content string) *envelope.Envelope {
	ch := t.Origin.Channel
	if t.Target != nil {
		switch c := envelope.Channel(t.Target.Channel); c {
		case envelope.ChannelSlack, envelope.ChannelGitHub, envelope.ChannelSentry, envelope.ChannelOpenProject:
			ch = c
		}
	}
	e := envelope.New(ch, role, content)
	e.ID = envelope.DerivedID(name + ":" + t.ID)
	e.Meta.TaskID = t.ID
	e.Meta.Thread = t.Origin.Meta.Thread
	if src := t.Origin.Meta.Source; src != nil {
		c := *src
		e.Meta.Source = &c
	}
	if t.Target != nil {
		e.Meta.SetTarget(t.Target)
	}
	e.Meta.Set("agent", map[string]any{"id": t.AgentID, "role": t.Role, "steps": t.Step})
	e.Meta.Budget = &envelope.Budget{Tokens: t.Tokens, Limit: s.cfg.TokenBudget}
	return e
}

// suggestion is the agent.suggestion envelope of a done task.
func (s *Service) suggestion(t *Task) *envelope.Envelope {
	e := s.base(t, "relay-suggestion", envelope.RoleAssistant, t.Answer)
	e.Context = &envelope.Context{System: t.System, Session: t.Session, Task: t.TaskText}
	if ids := t.refIDs(); len(ids) > 0 {
		e.RetrievalRefs = ids
	}
	if len(t.UnknownRefs) > 0 {
		u := make([]any, len(t.UnknownRefs))
		for i, r := range t.UnknownRefs {
			u[i] = r
		}
		e.Meta.Set("unknown_refs", u)
	}
	return e
}

// notice is the agent.notice envelope of a failed task.
func (s *Service) notice(t *Task) *envelope.Envelope {
	where := t.Origin.Meta.Thread
	if src := t.Origin.Meta.Source; src != nil && src.URL != "" {
		where = src.URL
	}
	text := fmt.Sprintf("The agent could not answer %s: %s.", where, t.Failure.Reason)
	e := s.base(t, "relay-notice", envelope.RoleSystem, text)
	e.Meta.Set("notice", map[string]any{"kind": t.Failure.Kind, "reason": t.Failure.Reason, "task_id": t.ID})
	return e
}
