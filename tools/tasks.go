package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// Tasks (MCP 2025-11-25, SEP-1686): long-running calls that outlive the
// runner's process (docs/protocol.md, "Tasks").
//
// A tool whose definition says execution.taskSupport "required" (or
// "optional", on a streamable HTTP server) is called as a task: the
// tools/call carries a "task" parameter, the server answers at once with a
// CreateTaskResult, and the runner polls tasks/get at the server's
// pollInterval (bounded to [MinTaskPoll, MaxTaskPoll]) until the task is
// completed, then fetches tasks/result. Each status message reaches the
// call's Progress. When the task stops for input (input_required) the
// runner calls tasks/result at once, which delivers the server's
// elicitation, put to the call's person as any other question.
//
// The task (server, task id, the session it lives on) is stored in the
// TaskStore before the first poll. A call whose runner stops while its
// task runs fails with ErrInterrupted and leaves the record; the call's
// redelivery (Request.Resume), in whichever runner takes it, polls the same
// task instead of calling the tool again. On streamable HTTP the task lives
// on the server's session, which the runner does not end while it holds
// tasks; a stdio server's tasks end with its process (the runner's child),
// so a resumed stdio task fails with an unknown outcome.

// Bounds of the interval between two tasks/get polls.
const (
	MinTaskPoll = time.Second
	MaxTaskPoll = 30 * time.Second
)

// Task statuses (2025-11-25).
const (
	TaskWorking       = "working"
	TaskInputRequired = "input_required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCancelled     = "cancelled"
)

// ErrTaskGone: the server no longer knows the task (it restarted, its TTL
// passed, or the session it lived on ended).
var ErrTaskGone = errors.New("the server no longer knows the task")

// TaskRecord is a call's task, as the TaskStore keeps it.
type TaskRecord struct {
	// CallID is the call's (Request.CallID): the store's key.
	CallID string `json:"call_id"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// TaskID is the server's task id.
	TaskID string `json:"task_id"`
	// Transport is the server's type (stdio, http); Session the
	// Mcp-Session-Id the task lives on (HTTP), Protocol its version.
	Transport string `json:"transport"`
	Session   string `json:"session,omitempty"`
	Protocol  string `json:"protocol,omitempty"`
	// Runner and PID name the runner and the stdio server process that
	// created the task (a stdio task lives only in that process).
	Runner string `json:"runner"`
	PID    int    `json:"pid,omitempty"`
	// PollMS is the server's pollInterval.
	PollMS int64 `json:"poll_interval_ms,omitempty"`
	// Status and Message are the last polled status and statusMessage.
	Status  string `json:"status"`
	Message string `json:"status_message,omitempty"`
	// Created is when the task was created: the audit record's duration
	// starts there.
	Created time.Time `json:"created"`
}

// TaskStore keeps the tasks of calls in flight durably (the tool runner's
// JetStream bucket). LoadTask returns nil and no error when the call has
// none. Implementations must be safe for concurrent use.
type TaskStore interface {
	LoadTask(ctx context.Context, callID string) (*TaskRecord, error)
	SaveTask(ctx context.Context, t *TaskRecord) error
	DeleteTask(ctx context.Context, callID string) error
}

// MemoryTasks is a TaskStore in memory (tests; a runner alone).
type MemoryTasks struct {
	mu sync.Mutex
	m  map[string]TaskRecord
}

// LoadTask implements TaskStore.
func (m *MemoryTasks) LoadTask(_ context.Context, id string) (*TaskRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.m[id]
	if !ok {
		return nil, nil
	}
	return &t, nil
}

// SaveTask implements TaskStore.
func (m *MemoryTasks) SaveTask(_ context.Context, t *TaskRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]TaskRecord{}
	}
	m.m[t.CallID] = *t
	return nil
}

// DeleteTask implements TaskStore.
func (m *MemoryTasks) DeleteTask(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, id)
	return nil
}

// task is the wire form of a Task.
type task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	PollInterval  *int64 `json:"pollInterval,omitempty"`
}

// holdsSession reports whether session has tasks this runner polls: its
// DELETE is left out (taskHTTP).
func (r *Runner) holdsSession(session string) bool {
	if session == "" {
		return false
	}
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	return r.held[session] > 0
}

// hold keeps session open while a task of it is polled.
func (r *Runner) holdSession(session string) (release func()) {
	if session == "" {
		return func() {}
	}
	r.heldMu.Lock()
	if r.held == nil {
		r.held = map[string]int{}
	}
	r.held[session]++
	r.heldMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.heldMu.Lock()
			if r.held[session]--; r.held[session] <= 0 {
				delete(r.held, session)
			}
			r.heldMu.Unlock()
		})
	}
}

// taskMode is how tool is called on c: as a task or not.
func (c *conn) asTask(tool string) bool {
	switch c.r.modes.get(c.cfg.Name, tool) {
	case "required":
		return true
	case "optional":
		// A task on a streamable HTTP server outlives the runner; on stdio
		// it would not, and the server runs the call itself.
		return c.cfg.Type == mcpconfig.HTTP
	}
	return false
}

// wireFor is the wire of task requests on session s of c, or of the
// stored task rec's session.
func (c *conn) wireFor(s *mcp.ClientSession, rec *TaskRecord) (wire, error) {
	switch c.cfg.Type {
	case mcpconfig.Stdio:
		c.mu.Lock()
		side := c.side
		current := c.session == s
		c.mu.Unlock()
		if side == nil || !current {
			return nil, fmt.Errorf("%w: server %s has no session for tasks", ErrOffline, c.cfg.Name)
		}
		return side, nil
	case mcpconfig.HTTP:
		endpoint, client, err := remoteEndpoint(c.r.cfg.HTTPClient, c.cfg)
		if err != nil {
			return nil, err
		}
		w := &httpWire{client: client, endpoint: endpoint}
		if rec != nil {
			w.session, w.version = rec.Session, rec.Protocol
		} else {
			w.session, w.version = s.ID(), s.InitializeResult().ProtocolVersion
		}
		return w, nil
	}
	return nil, fmt.Errorf("%w: server %s (%s) does not run tasks", ErrToolFailed, c.cfg.Name, c.cfg.Type)
}

// resumeTask is the stored task of a resumed call, or nil.
func (c *conn) resumeTask(ctx context.Context) (*TaskRecord, error) {
	f := callOf(ctx)
	store := c.r.cfg.Tasks
	if store == nil || f == nil || !f.req.Resume || f.req.CallID == "" {
		return nil, nil
	}
	rec, err := store.LoadTask(ctx, f.req.CallID)
	if err != nil || rec == nil {
		return nil, err
	}
	c.log.Info("resuming the task of an interrupted call", "call_id", rec.CallID, "task", rec.TaskID, "status", rec.Status)
	return rec, nil
}

// runTask runs a call as a task on session s: it creates the task (or
// takes rec, a resumed call's), polls it and returns its result.
func (c *conn) runTask(ctx context.Context, s *mcp.ClientSession, params *mcp.CallToolParams, rec *TaskRecord) (_ *mcp.CallToolResult, err error) {
	f := callOf(ctx)
	store := c.r.cfg.Tasks
	durable := store != nil && f != nil && f.req.CallID != ""
	if rec != nil && rec.Transport == string(mcpconfig.Stdio) && (rec.Runner != c.r.id || rec.PID != c.pid()) {
		c.forgetTask(ctx, rec)
		return nil, fmt.Errorf("%w: task %s ran in the stdio server process of a runner that stopped; a stdio server's tasks end with its process, so its outcome is unknown and it was not run again",
			ErrToolFailed, rec.TaskID)
	}
	w, err := c.wireFor(s, rec)
	if err != nil {
		return nil, err
	}
	if f != nil {
		// Server requests during the task (an elicitation through
		// tasks/result on stdio) find their call.
		c.inflight.add(f)
		defer c.inflight.remove(f)
	}
	onRequest := c.taskRequests(ctx)
	if rec == nil {
		p := map[string]any{"name": params.Name, "task": map[string]any{}}
		if params.Arguments != nil {
			p["arguments"] = params.Arguments
		}
		if params.Meta != nil {
			p["_meta"] = params.Meta
		}
		raw, err := w.call(ctx, "tools/call", p, onRequest)
		if err != nil {
			return nil, wireErr(err)
		}
		var created struct {
			Task *task `json:"task"`
		}
		if err := json.Unmarshal(raw, &created); err != nil || created.Task == nil || created.Task.TaskID == "" {
			// The server ran the call without a task.
			var res mcp.CallToolResult
			if err := json.Unmarshal(raw, &res); err != nil {
				return nil, fmt.Errorf("%w: tools/call result: %v", ErrToolFailed, err)
			}
			return &res, nil
		}
		rec = &TaskRecord{Server: c.cfg.Name, Tool: params.Name, TaskID: created.Task.TaskID, Transport: string(c.cfg.Type),
			Runner: c.r.id, PID: c.pid(), Status: created.Task.Status, Message: created.Task.StatusMessage, Created: time.Now().UTC()}
		if hw, ok := w.(*httpWire); ok {
			rec.Session, rec.Protocol = hw.session, hw.version
		}
		if created.Task.PollInterval != nil {
			rec.PollMS = *created.Task.PollInterval
		}
		if f != nil {
			rec.CallID = f.req.CallID
		}
		if durable {
			if err := store.SaveTask(ctx, rec); err != nil {
				c.log.Warn("task not stored; a runner restart would lose it", "task", rec.TaskID, "err", err)
			}
		}
		c.log.Info("tool call runs as a task", "tool", params.Name, "task", rec.TaskID, "poll_ms", rec.PollMS)
	}
	if f != nil {
		f.mcpTask, f.since = rec.TaskID, rec.Created
	}
	// The session is not ended while the task runs, nor after an
	// interruption: the call's redelivery polls it, maybe after this
	// runner closed its sessions.
	release := c.r.holdSession(rec.Session)
	defer func() {
		if !errors.Is(err, ErrInterrupted) {
			release()
		}
	}()
	c.report(ctx, rec)
	for {
		switch rec.Status {
		case TaskCompleted, TaskFailed, TaskInputRequired:
			// tasks/result returns once the task ends; on input_required it
			// first delivers the server's questions.
			raw, err := w.call(ctx, "tasks/result", map[string]any{"taskId": rec.TaskID}, onRequest)
			if err != nil {
				if ctx.Err() != nil {
					return nil, c.taskStopped(ctx, w, rec, err)
				}
				c.forgetTask(ctx, rec)
				if rec.Status == TaskFailed {
					return nil, fmt.Errorf("%w: task %s failed: %s", ErrToolFailed, rec.TaskID, cmpOr(rec.Message, err.Error()))
				}
				return nil, wireErr(err)
			}
			var res mcp.CallToolResult
			if err := json.Unmarshal(raw, &res); err != nil {
				c.forgetTask(ctx, rec)
				return nil, fmt.Errorf("%w: tasks/result of task %s: %v", ErrToolFailed, rec.TaskID, err)
			}
			c.forgetTask(ctx, rec)
			return &res, nil
		case TaskCancelled:
			c.forgetTask(ctx, rec)
			return nil, fmt.Errorf("%w: the server cancelled task %s: %s", ErrToolFailed, rec.TaskID, cmpOr(rec.Message, "no reason given"))
		}
		if err := c.pollWait(ctx, rec); err != nil {
			return nil, c.taskStopped(ctx, w, rec, err)
		}
		raw, err := w.call(ctx, "tasks/get", map[string]any{"taskId": rec.TaskID}, onRequest)
		if err != nil {
			if ctx.Err() != nil {
				return nil, c.taskStopped(ctx, w, rec, err)
			}
			var re *rpcError
			if errors.As(err, &re) || errors.Is(err, ErrTaskGone) {
				c.forgetTask(ctx, rec)
				return nil, fmt.Errorf("%w: task %s: %w: %v; it may or may not have completed", ErrToolFailed, rec.TaskID, ErrTaskGone, err)
			}
			return nil, wireErr(err)
		}
		var t task
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("%w: tasks/get of task %s: %v", ErrToolFailed, rec.TaskID, err)
		}
		changed := t.Status != rec.Status || t.StatusMessage != rec.Message
		rec.Status, rec.Message = t.Status, t.StatusMessage
		if t.PollInterval != nil {
			rec.PollMS = *t.PollInterval
		}
		if changed {
			c.report(ctx, rec)
			if durable {
				if err := store.SaveTask(ctx, rec); err != nil {
					c.log.Debug("task status not stored", "task", rec.TaskID, "err", err)
				}
			}
		}
	}
}

// wireErr is an error of a task request as the call's: a JSON-RPC error
// the server answered is a ToolError, the rest stays for classify.
func wireErr(err error) error {
	var re *rpcError
	if errors.As(err, &re) {
		return &ToolError{Code: re.Code, Message: re.Message}
	}
	return err
}

// report hands the task's status to the call's TaskStatus and Progress.
func (c *conn) report(ctx context.Context, rec *TaskRecord) {
	f := callOf(ctx)
	if f == nil {
		return
	}
	msg := rec.Status
	if rec.Message != "" {
		msg = rec.Message
	}
	ev := ProgressEvent{Message: msg, Status: rec.Status, Task: rec.TaskID}
	if f.req.TaskStatus != nil {
		f.req.TaskStatus(ev)
	}
	if f.req.Progress != nil {
		f.req.Progress(ev)
	}
}

// pollWait waits the task's poll interval, bounded.
func (c *conn) pollWait(ctx context.Context, rec *TaskRecord) error {
	d := time.Duration(rec.PollMS) * time.Millisecond
	d = min(max(d, MinTaskPoll), MaxTaskPoll)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// taskStopped ends a task whose call's context ended: a cancel by a person
// or the call's time limit sends tasks/cancel and forgets the task; the
// runner stopping leaves it for the call's redelivery (ErrInterrupted).
func (c *conn) taskStopped(ctx context.Context, w wire, rec *TaskRecord, err error) error {
	f := callOf(ctx)
	var ct *callTimeout
	cancelled := f != nil && f.run != nil && f.run.cancelCause() != nil
	timedOut := errors.As(context.Cause(ctx), &ct)
	durable := c.r.cfg.Tasks != nil && f != nil && f.req.CallID != ""
	if durable && !cancelled && !timedOut {
		c.log.Info("call interrupted while its task runs; the task is kept for the call's redelivery", "task", rec.TaskID)
		return fmt.Errorf("%w: task %s: %w", ErrInterrupted, rec.TaskID, err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, cerr := w.call(cctx, "tasks/cancel", map[string]any{"taskId": rec.TaskID}, nil); cerr != nil {
		c.log.Warn("tasks/cancel failed", "task", rec.TaskID, "err", cerr)
	} else {
		c.log.Info("task cancelled on the server", "task", rec.TaskID)
	}
	c.forgetTask(ctx, rec)
	return err
}

// forgetTask deletes rec from the store.
func (c *conn) forgetTask(ctx context.Context, rec *TaskRecord) {
	store := c.r.cfg.Tasks
	if store == nil || rec.CallID == "" {
		return
	}
	if err := store.DeleteTask(context.WithoutCancel(ctx), rec.CallID); err != nil {
		c.log.Warn("finished task not deleted; it expires with its bucket's TTL", "task", rec.TaskID, "err", err)
	}
}

// taskRequests answers the server requests an HTTP task request's stream
// carries: elicitation goes to the call's person, sampling to the relay's
// model.
func (c *conn) taskRequests(ctx context.Context) serverRequest {
	return func(_ context.Context, method string, params json.RawMessage) (any, error) {
		switch method {
		case "elicitation/create":
			var p mcp.ElicitParams
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, err
			}
			return c.askHuman(ctx, &p, nil)
		case "sampling/createMessage":
			var p mcp.CreateMessageParams
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, err
			}
			return c.sample(ctx, &mcp.CreateMessageRequest{Params: &p})
		case "roots/list":
			return &mcp.ListRootsResult{Roots: []*mcp.Root{}}, nil
		case "ping":
			return map[string]any{}, nil
		}
		return nil, fmt.Errorf("the relay does not answer %s during a task", strings.TrimSpace(method))
	}
}
