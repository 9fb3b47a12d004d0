// Package hooks is the hooks worker: configured MCP actions fired by inbound
// envelopes, without a model in the loop.
//
// A hooks file (Load, schemas/hooks.schema.json) lists hooks: triggers in
// the agent's syntax, an optional condition (Compile), and actions that call
// a tool with parameters mapped from the envelope's context (NewContext).
// The service consumes the inbound envelopes its hooks' triggers name
// (durable consumer "hooks" filtered on their in.{channel}.{event} subjects;
// instances compete), runs the matching hooks' actions in order, at
// most Config.Concurrency at once per process, and calls each tool through
// the tool runner over the bus (tool.call, answered on tool.result or
// tool.failed), so the runner's role capabilities, budgets, stop switch and
// audit log apply; the call's meta.agent is {"id": "hook:<name>", "role":
// <the hook's role>}, which the audit record names.
//
// Each (hook, action, envelope) runs at most once: it is claimed in the
// key-value bucket "<PREFIX>_HOOKRUNS" before it runs. Every execution is
// recorded as a system envelope on hook.executed (meta.hook_execution, an
// Execution). An action with `reply: thread` posts a successful result to
// the envelope's thread as an agent.suggestion (meta.target), which the
// approvals worker handles like any other answer.
package hooks

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/tools"
)

// Subjects, relative to the bus prefix.
const (
	// SubjectExecuted carries one system envelope per execution,
	// meta.hook_execution holding the Execution.
	SubjectExecuted = "hook.executed"
	// SubjectSuggestion is where `reply: thread` results go (the approvals
	// worker's input).
	SubjectSuggestion = "agent.suggestion"
)

// Execution statuses.
const (
	StatusSuccess = "success"
	StatusError   = "error"
	StatusTimeout = "timeout"
	StatusSkipped = "skipped"
	StatusInvalid = "invalid"
)

// Execution is the record of one action run for one envelope.
type Execution struct {
	Hook       string `json:"hook"`
	Action     int    `json:"action"` // 1-based
	EnvelopeID string `json:"envelope_id"`
	Thread     string `json:"thread,omitempty"`
	// DeliveryID and TaskID are the triggering envelope's webhook delivery
	// and task, when it has them: `relay trace` and the console's Story page
	// find the execution by either.
	DeliveryID string `json:"delivery_id,omitempty"`
	TaskID     string `json:"task_id,omitempty"`
	Server     string `json:"server"`
	Tool       string `json:"tool"`
	Role       string `json:"role"`
	// Params are the resolved arguments, secrets redacted.
	Params map[string]any `json:"params,omitempty"`
	// ServerStatus is the runner's view of the server when the action ran.
	ServerStatus *tools.ServerStatus `json:"server_status,omitempty"`
	Status       string              `json:"status"`
	DurationMS   float64             `json:"duration_ms"`
	Result       string              `json:"result,omitempty"`
	Error        string              `json:"error,omitempty"`
	CallID       string              `json:"call_id,omitempty"`
	AuditID      string              `json:"audit_id,omitempty"`
	// Reply says where a `reply: thread` result went, or why it did not.
	Reply string    `json:"reply,omitempty"`
	At    time.Time `json:"at"`
}

// Config configures the service.
type Config struct {
	// Hooks are the hooks to run (Load); nil means none.
	Hooks *File
	// Path, when set, is the hooks file, watched for edits every
	// ReloadInterval (default 2s): a valid edit takes effect, an invalid one
	// keeps the hooks in force and is logged.
	Path           string
	ReloadInterval time.Duration
	// Servers, when set, returns the server names of mcp.json: a reload
	// checks every action's serverId against them when no tool runner
	// answers (one that answers is asked instead). nil skips that check.
	Servers func() []string
	// Consumer is the durable consumer name. Default "hooks".
	Consumer string
	// FromStart makes a new consumer read the inbound stream from its start;
	// by default a hooks consumer created on an installation that already
	// holds envelopes starts at new ones (hooks never fire on a week of old
	// webhooks on their first start). An existing consumer keeps its place.
	FromStart bool
	// Concurrency is how many actions this process runs at once. Default 5.
	Concurrency int
	// RunTTL is how long claims are remembered. Default 24h.
	RunTTL time.Duration
	// DiscoveryTTL is how long a role's tool list is cached when its
	// servers give no ttlMs of their own (see DiscoveryTTL). Default 5m.
	DiscoveryTTL time.Duration
	// Redactor removes secrets from recorded parameters and results; nil
	// redacts only what looks like a token.
	Redactor *tools.Redactor
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	c.Consumer = cmp.Or(c.Consumer, "hooks")
	c.Concurrency = config.Positive(c.Concurrency, 5)
	c.RunTTL = config.Positive(c.RunTTL, 24*time.Hour)
	c.DiscoveryTTL = config.Positive(c.DiscoveryTTL, 5*time.Minute)
	c.ReloadInterval = config.Positive(c.ReloadInterval, 2*time.Second)
	if c.Redactor == nil {
		c.Redactor = tools.NewRedactor()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Hooks == nil {
		c.Hooks = &File{}
	}
}

// Validate reports a configuration the service cannot run with.
func (c *Config) Validate() error {
	if c.RunTTL < time.Minute {
		return fmt.Errorf("hooks: run TTL %s must be at least 1m", c.RunTTL)
	}
	return nil
}

// Service is the hooks worker. Run it once; Execute and SetHooks are safe
// for concurrent use.
type Service struct {
	cfg    Config
	log    *slog.Logger
	bus    *bus.Bus
	hooks  atomic.Pointer[File]
	runs   jetstream.KeyValue
	caller *busCaller
	sem    chan struct{}
	digest []byte // of the hooks file when New ran

	mu      sync.Mutex
	catalog map[string]cachedTools    // by role
	schemas map[string]compiledSchema // by tool name
}

// compiledSchema is a tool's inputSchema compiled, with the JSON it was
// compiled from: a server that changes the schema gets it compiled anew.
type compiledSchema struct {
	raw    string
	schema *jsonschema.Schema
}

type cachedTools struct {
	at    time.Time
	ttl   time.Duration // DiscoveryTTL of the list
	tools map[string]tools.ToolInfo
}

// RunBucket returns the claim bucket name for a bus prefix.
func RunBucket(prefix string) string {
	return strings.ToUpper(strings.ReplaceAll(prefix, "-", "_")) + "_HOOKRUNS"
}

// New opens the claim bucket.
func New(ctx context.Context, cfg Config, b *bus.Bus) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: cfg.Logger, bus: b, caller: newBusCaller(b), sem: make(chan struct{}, cfg.Concurrency),
		catalog: map[string]cachedTools{}, schemas: map[string]compiledSchema{}}
	s.hooks.Store(cfg.Hooks)
	if cfg.Path != "" {
		s.digest = digest(cfg.Path)
	}
	kv, err := b.OpenBucket(ctx, RunBucket(b.Prefix()), "relay hooks: (hook, action, envelope) runs claimed, for exactly-once", cfg.RunTTL)
	if err != nil {
		return nil, err
	}
	s.runs = kv
	return s, nil
}

// Hooks are the hooks in force.
func (s *Service) Hooks() *File { return s.hooks.Load() }

// SetHooks replaces the hooks in force (a reload) and forgets the tool
// discovery cache.
func (s *Service) SetHooks(f *File) {
	if f == nil {
		f = &File{}
	}
	s.hooks.Store(f)
	s.Refresh()
}

// Refresh forgets the tool discovery cache.
func (s *Service) Refresh() {
	s.mu.Lock()
	clear(s.catalog)
	clear(s.schemas)
	s.mu.Unlock()
}

// Run consumes inbound envelopes until ctx is cancelled, then drains.
func (s *Service) Run(ctx context.Context) error {
	if err := s.caller.start(); err != nil {
		return err
	}
	defer s.caller.stop()
	// `relay mcp refresh` reaches the tool runners on SubjectRefresh; the
	// hooks drop their own tool lists with them (listening, not answering).
	refresh, err := s.bus.Conn().Subscribe(s.bus.Subject(tools.SubjectRefresh), func(*nats.Msg) { s.Refresh() })
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", tools.SubjectRefresh, err)
	}
	defer func() { _ = refresh.Unsubscribe() }()
	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	wg.Add(1)
	go func() { defer wg.Done(); s.checkAtStart(wctx) }()
	if s.cfg.Path != "" {
		wg.Add(1)
		go func() { defer wg.Done(); s.watch(wctx, s.cfg.Path, s.cfg.ReloadInterval) }()
	}
	// A consumer left on noHooksSubject by an earlier run is recreated at
	// new envelopes before the hooks in force filter it.
	if err := s.filter(ctx, s.hooks.Load()); err != nil {
		s.log.Warn("hooks consumer not re-filtered before start", "err", err)
	}
	return s.bus.Consume(ctx, bus.ConsumerConfig{
		Name:    s.cfg.Consumer,
		Subject: envelope.SubjectInbound + ".>",
		// Only the subjects the hooks' triggers name (in.{channel}.{event});
		// none when there are no hooks. A reload re-filters.
		Subjects:    subjects(s.hooks.Load()),
		Concurrency: s.cfg.Concurrency,
		DeliverNew:  !s.cfg.FromStart,
		// An action may wait 5 minutes for its tool; heartbeats keep it.
		AckWait: time.Minute,
	}, bus.HandlerFunc(s.Handle))
}

// checkAtStart checks the hooks against the running tool runner's tools
// and logs what it finds (the hooks run anyway: a tool may appear later).
func (s *Service) checkAtStart(ctx context.Context) {
	f := s.hooks.Load()
	if len(f.Hooks) == 0 {
		return
	}
	for _, p := range f.Check(s.CatalogFrom(ctx, f)) {
		if p.Warning {
			s.log.Warn("hooks file: "+p.String(), "hook", p.Hook)
		} else {
			s.log.Error("hooks file: "+p.String(), "hook", p.Hook)
		}
	}
}

// ownPost reports whether e is one of the relay's own posts, on which hooks
// never fire: a comment carrying the outbound marker (mappers.Marker), or a Slack message the relay's app posted
// (meta.slack.self; its Slack posts carry no marker in their text).
func ownPost(e *envelope.Envelope) bool {
	if strings.Contains(e.Content, mappers.MarkerPrefix) {
		return true
	}
	sl, _ := e.Meta.Extra["slack"].(map[string]any)
	self, _ := sl["self"].(bool)
	return self
}

// Handle runs the actions of every hook matching one inbound envelope.
// Only bus and bucket failures return an error (redelivery, where the
// actions done do not run again, and one whose delivery died mid-run is
// taken over).
func (s *Service) Handle(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	if ownPost(e) {
		return nil
	}
	matched, c := s.hooks.Load().Match(e)
	for _, h := range matched {
		for i := range h.Actions {
			if err := s.runOnce(ctx, h, i, m, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// RunKey is the claim key of (hook, action, envelope).
func RunKey(hook string, action int, envelopeID string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", hook, action, envelopeID)))
	return hex.EncodeToString(sum[:16])
}

type runRecord struct {
	State     string     `json:"state"` // running or done
	Execution *Execution `json:"execution,omitempty"`
	// Seq is the stream sequence of the message whose delivery claimed the
	// run: a redelivery of that message finds its earlier delivery died.
	Seq uint64 `json:"seq,omitempty"`
}

func (s *Service) runOnce(ctx context.Context, h *Hook, i int, m *bus.Message, c Context) error {
	e := m.Envelope
	key := RunKey(h.Name, i+1, e.ID)
	b, _ := json.Marshal(runRecord{State: "running", Seq: m.StreamSeq})
	retake := false
	if _, err := s.runs.Create(ctx, key, b); errors.Is(err, jetstream.ErrKeyExists) {
		var done bool
		if done, err = s.alreadyRun(ctx, key, m); done || err != nil {
			return err
		}
		retake = true
	} else if err != nil {
		return fmt.Errorf("claim hook %s action %d of %s: %w", h.Name, i+1, e.ID, err)
	}
	s.sem <- struct{}{}
	x := s.execute(ctx, h, i, e, c, key, retake)
	<-s.sem
	if h.Actions[i].Reply == "thread" {
		x.Reply = s.reply(ctx, h, e, &x, key)
	}
	b, _ = json.Marshal(runRecord{State: "done", Execution: &x, Seq: m.StreamSeq})
	if _, err := s.runs.Put(ctx, key, b); err != nil {
		s.log.Warn("hook run not recorded as done", "hook", h.Name, "action", i+1, "envelope_id", e.ID, "err", err)
	}
	return s.publish(ctx, key, &x)
}

// alreadyRun handles a claimed run and reports whether it is settled: a done
// one has its record published again (the same message id, so the stream
// keeps one); a running one belongs to another delivery or instance, unless
// this is a redelivery of the very message that claimed it, or a replay of
// its dead letter: that delivery died mid-run and this one takes it over
// (false). The takeover calls the tool with the same call id, so the tool
// runner, which claims call ids, runs it at most once and answers with the
// first run's result when there was one.
func (s *Service) alreadyRun(ctx context.Context, key string, m *bus.Message) (bool, error) {
	ent, err := s.runs.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("read hook run %s: %w", key, err)
	}
	var rec runRecord
	if json.Unmarshal(ent.Value(), &rec) != nil {
		s.log.Warn("hook run record unreadable; not run again", "run", key)
		return true, nil
	}
	if rec.State == "done" {
		if rec.Execution == nil {
			return true, nil
		}
		return true, s.publish(ctx, key, rec.Execution)
	}
	if rec.Seq != 0 && (rec.Seq == m.StreamSeq || m.Header.Get(bus.HeaderReplayFor) != "") {
		s.log.Info("hook run claimed by a delivery that did not finish; taking it over", "run", key, "seq", m.StreamSeq)
		return false, nil
	}
	s.log.Debug("hook run claimed by another delivery; not run again", "run", key)
	return true, nil
}

func (s *Service) publish(ctx context.Context, key string, x *Execution) error {
	e := ExecutionEnvelope(x)
	if _, err := s.bus.Publish(ctx, SubjectExecuted, e, bus.WithMsgID("hook-executed-"+key)); err != nil {
		return fmt.Errorf("publish hook execution %s: %w", key, err)
	}
	s.log.Info("hook action executed", "hook", x.Hook, "action", x.Action, "envelope_id", x.EnvelopeID,
		"thread", x.Thread, "tool", x.Server+"."+x.Tool, "status", x.Status, "duration_ms", x.DurationMS)
	return nil
}

// ExecutionEnvelope wraps an execution record in a system envelope.
func ExecutionEnvelope(x *Execution) *envelope.Envelope {
	text := fmt.Sprintf("hook %s action %d (%s.%s): %s", x.Hook, x.Action, x.Server, x.Tool, x.Status)
	if x.Error != "" {
		text += ": " + clip.Line(x.Error, 200)
	}
	e := envelope.New(envelope.ChannelInternal, envelope.RoleSystem, text)
	e.Meta.Thread, e.Meta.TaskID = x.Thread, x.TaskID
	if x.DeliveryID != "" {
		e.Meta.Source = &envelope.Source{DeliveryID: x.DeliveryID}
	}
	e.Meta.Encode("hook_execution", x)
	return e
}

// ExecutionOf reads the record of a hook.executed envelope.
func ExecutionOf(e *envelope.Envelope) (*Execution, bool) {
	v, ok := e.Meta.Get("hook_execution")
	if !ok {
		return nil, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	var x Execution
	if json.Unmarshal(b, &x) != nil {
		return nil, false
	}
	return &x, true
}

// maxResult bounds the result text kept in a record.
const maxResult = 4000

// Execute runs action i of h for e (context c) without a claim and returns
// its record; callID names the call (RunKey for the service). It never
// returns an error: every failure is the record's status.
func (s *Service) Execute(ctx context.Context, h *Hook, i int, e *envelope.Envelope, c Context, callID string) Execution {
	return s.execute(ctx, h, i, e, c, callID, false)
}

// hookCallID is the id of the tool-call envelope of callID: the same for
// every attempt, so the tool runner sees one call however many times a
// takeover sends it.
func hookCallID(callID string) string { return envelope.DerivedID("relay-hook-call:" + callID) }

// execute is Execute; retake says an earlier attempt of callID may have sent
// the call: it is sent again under a message id of its own (the first one's
// may still be in the stream's duplicate window), and the tool runner
// answers it from its record of the call id when the call already ran.
func (s *Service) execute(ctx context.Context, h *Hook, i int, e *envelope.Envelope, c Context, callID string, retake bool) Execution {
	start := time.Now()
	act := h.Actions[i]
	p := act.Parameters
	x := Execution{Hook: h.Name, Action: i + 1, EnvelopeID: e.ID, Thread: e.Meta.Thread, TaskID: e.Meta.TaskID,
		Server: p.ServerID, Tool: p.ToolName, Role: h.Role, At: start.UTC()}
	if e.Meta.Source != nil {
		x.DeliveryID = e.Meta.Source.DeliveryID
	}
	finish := func(status, msg string) Execution {
		x.Status, x.Error = status, msg
		x.DurationMS = float64(time.Since(start).Microseconds()) / 1000
		return x
	}
	if reason := s.snapshot(ctx, &x); reason != "" {
		return finish(StatusSkipped, reason)
	}
	info, err := s.toolInfo(ctx, h.Role, p.Tool())
	if err != nil {
		if ss := x.ServerStatus; ss != nil && ss.State != tools.StateReady && ss.State != tools.StateDegraded {
			// Its tools are unknown until it connects: unavailable, not invalid.
			return finish(StatusSkipped, fmt.Sprintf("server %s is %s (%s)", p.ServerID, ss.State, err))
		}
		return finish(StatusInvalid, err.Error())
	}
	args, err := act.Resolve(c, info.InputSchema)
	if red, _ := s.cfg.Redactor.Value(map[string]any(args)); red != nil {
		x.Params, _ = red.(map[string]any)
	}
	if err != nil {
		return finish(StatusInvalid, err.Error())
	}
	if sch, err := s.inputSchema(info); err != nil {
		return finish(StatusInvalid, fmt.Sprintf("inputSchema of %s: %v", p.Tool(), err))
	} else if err := checkArgs(sch, args); err != nil {
		return finish(StatusInvalid, "arguments break the inputSchema: "+clip.Line(err.Error(), 500))
	}
	call := e.Reply(e.Channel, envelope.RoleAssistant, fmt.Sprintf("hook %s calls %s", h.Name, p.Tool()))
	call.ID = hookCallID(callID)
	call.Meta.TaskID = "hook-" + callID
	call.ToolCall = &envelope.ToolCall{ID: callID, Name: p.Tool(), Args: args}
	call.Meta.Set("agent", map[string]any{"id": "hook:" + h.Name, "role": h.Role})
	call.Meta.Set("hook", map[string]any{"name": h.Name, "action": i + 1, "envelope_id": e.ID})
	x.CallID = call.ID
	cctx, cancel := context.WithTimeout(ctx, time.Duration(p.TimeoutMS())*time.Millisecond)
	defer cancel()
	msgID := "hook-call-" + callID
	if retake {
		msgID += "-retake-" + uuid.NewString()
	}
	r, err := s.caller.call(cctx, call, msgID)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return finish(StatusTimeout, fmt.Sprintf("no result within %d ms", p.TimeoutMS()))
	case err != nil:
		return finish(StatusError, err.Error())
	}
	x.AuditID = r.Meta.AuditID
	var res map[string]any
	if r.ToolCall != nil {
		res = r.ToolCall.Result
	}
	status, _ := res["status"].(string)
	msg, _ := res["error"].(string)
	if text, _ := res["text"].(string); text != "" {
		x.Result = clip.To(text, maxResult)
	} else if st, ok := res["structured"]; ok {
		b, _ := json.Marshal(st)
		x.Result = clip.To(string(b), maxResult)
	}
	return finish(classify(status, msg), msg)
}

// classify maps the runner's status to an execution status: a server that
// is offline, disabled or behind an open breaker skips the action.
func classify(status, msg string) string {
	switch tools.Status(status) {
	case tools.StatusSuccess:
		return StatusSuccess
	case tools.StatusTimeout:
		return StatusTimeout
	case tools.StatusDisabled:
		return StatusSkipped
	}
	for _, e := range []error{tools.ErrOffline, tools.ErrBreakerOpen, tools.ErrDisabled} {
		if strings.Contains(msg, e.Error()) {
			return StatusSkipped
		}
	}
	if strings.Contains(msg, tools.ErrInvalidArguments.Error()) {
		return StatusInvalid
	}
	return StatusError
}

// snapshot records the server's status and returns why the action is
// skipped, or "".
func (s *Service) snapshot(ctx context.Context, x *Execution) string {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := tools.StatusRemote(sctx, s.bus.Conn(), s.bus.Prefix())
	if err != nil {
		return "tool runner unavailable: " + err.Error()
	}
	for i := range st.Servers {
		if ss := st.Servers[i]; ss.Name == x.Server {
			x.ServerStatus = &ss
			switch {
			case st.Stopped:
				return "tool execution is stopped by the stop switch"
			case ss.State == "offline" || ss.State == "disabled":
				reason := "server " + x.Server + " is " + ss.State
				if ss.DisabledReason != "" {
					reason += " (" + ss.DisabledReason + ")"
				} else if ss.LastError != "" {
					reason += " (" + clip.Line(ss.LastError, 200) + ")"
				}
				return reason
			case ss.Breaker == "open":
				return "server " + x.Server + ": circuit breaker open"
			}
			return ""
		}
	}
	return "server " + x.Server + " is not configured in the tool runner"
}

// DiscoveryTTL is how long a role's tool list may be cached: the shortest
// of its servers' ttlMs (ToolInfo.ServerTTLMs), a server that gave none
// counting for def (Config.DiscoveryTTL); def for an empty list.
func DiscoveryTTL(list []tools.ToolInfo, def time.Duration) time.Duration {
	if len(list) == 0 {
		return def
	}
	var ttl time.Duration
	for _, t := range list {
		d := def
		if t.ServerTTLMs > 0 {
			d = time.Duration(t.ServerTTLMs) * time.Millisecond
		}
		if ttl == 0 || d < ttl {
			ttl = d
		}
	}
	return ttl
}

// toolInfo finds a tool the role may call, from a cache of DiscoveryTTL.
func (s *Service) toolInfo(ctx context.Context, role, name string) (tools.ToolInfo, error) {
	for attempt := range 2 {
		s.mu.Lock()
		ct, ok := s.catalog[role]
		s.mu.Unlock()
		if !ok || time.Since(ct.at) > ct.ttl || attempt == 1 {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			list, err := tools.ListRemote(lctx, s.bus.Conn(), s.bus.Prefix(), role)
			cancel()
			if err != nil {
				return tools.ToolInfo{}, fmt.Errorf("list tools of role %s: %w", role, err)
			}
			ct = cachedTools{at: time.Now(), ttl: DiscoveryTTL(list, s.cfg.DiscoveryTTL), tools: make(map[string]tools.ToolInfo, len(list))}
			for _, t := range list {
				ct.tools[t.Name] = t
			}
			s.mu.Lock()
			s.catalog[role] = ct
			s.mu.Unlock()
		}
		if info, ok := ct.tools[name]; ok {
			return info, nil
		}
		if attempt == 0 && ok && time.Since(ct.at) < time.Second {
			break // just listed: asking again tells nothing new
		}
	}
	return tools.ToolInfo{}, fmt.Errorf("tool %s is not among the tools role %q may call", name, role)
}

func (s *Service) inputSchema(info tools.ToolInfo) (*jsonschema.Schema, error) {
	if info.InputSchema == nil {
		info.InputSchema = map[string]any{"type": "object"}
	}
	raw, err := json.Marshal(info.InputSchema)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.schemas[info.Name]; ok && c.raw == string(raw) {
		return c.schema, nil
	}
	sch, err := compileInput(info.Name, raw)
	if err != nil {
		return nil, err
	}
	s.schemas[info.Name] = compiledSchema{raw: string(raw), schema: sch}
	return sch, nil
}

// reply posts a successful result to e's thread as an agent.suggestion; it
// returns what happened, for the record.
func (s *Service) reply(ctx context.Context, h *Hook, e *envelope.Envelope, x *Execution, key string) string {
	if x.Status != StatusSuccess {
		return "not posted: the action did not succeed"
	}
	t, err := envelope.TargetOf(e)
	if err != nil {
		return "not posted: " + err.Error()
	}
	text := x.Result
	if strings.TrimSpace(text) == "" {
		text = fmt.Sprintf("%s.%s succeeded (hook %s)", x.Server, x.Tool, h.Name)
	}
	out := e.Reply(e.Channel, envelope.RoleAssistant, text)
	out.Meta.TaskID = "hook-" + key
	out.Meta.SetTarget(t)
	out.Meta.Set("agent", map[string]any{"id": "hook:" + h.Name, "role": h.Role})
	out.Meta.Set("hook", map[string]any{"name": h.Name, "action": x.Action, "envelope_id": e.ID})
	if _, err := s.bus.Publish(ctx, SubjectSuggestion, out, bus.WithMsgID("hook-reply-"+key)); err != nil {
		return "not posted: " + err.Error()
	}
	return "posted to " + t.String()
}
