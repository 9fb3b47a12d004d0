// Package toolrunner is the tool runner worker: it consumes tool-call
// envelopes from the bus (subject tool.call, durable consumer "toolrunner"),
// runs them on MCP servers through a tools.Runner, and answers each with a
// `tool` envelope carrying tool_call.result: on tool.result when the run
// succeeded, on tool.failed (result.error set) otherwise.
//
// It also publishes every audit record as a system envelope on audit.tool,
// announces each auto-disable and each re-enable of an auto-disabled server
// once (a system envelope on system.toolrunner, and the same text on
// agent.notice addressed to the configured Slack ops channel, which the
// outbound worker posts), keeps enable/disable state in a JetStream key-value
// bucket (KVState) that `relay mcp enable|disable` writes, and answers
// rpc.tool.list / rpc.tool.status requests (tools.ListRemote) as the
// nats.go/micro service "relay-toolrunner" (tools.Serve), stopped when Run
// returns.
//
// Redelivered calls do not run a tool twice: a call's id is claimed in the
// key-value bucket "<PREFIX>_TOOLCALLS" before the run, and the reply
// envelope is stored there before it is published (with Nats-Msg-Id
// "tool-result-<call id>"), so a redelivery republishes the stored reply.
package toolrunner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Subjects this service publishes, relative to the bus prefix (see also
// envelope.SubjectToolResult and envelope.SubjectToolFailed).
const (
	// SubjectAudit carries one system envelope per invocation, meta.audit
	// holding the tools.Record.
	SubjectAudit = envelope.SubjectAudit + ".tool"
	// SubjectNotice carries system notices (a server was auto-disabled or
	// enabled again).
	SubjectNotice = envelope.SubjectSystem + ".toolrunner"
	// SubjectHumanNotice is where notices for humans go: the outbound
	// worker posts agent.notice envelopes to their Slack target.
	SubjectHumanNotice = "agent.notice"
)

// Config configures the service.
type Config struct {
	// Tools configures the runner. The service sets its State, Audit and
	// Notify.
	Tools tools.Config
	// Consumer is the durable consumer name. Default "toolrunner".
	Consumer string
	// Concurrency is how many calls this process runs at once. Default 25
	// (the policy's global limit still applies).
	Concurrency int
	// CallRecordTTL is how long completed calls are remembered for
	// de-duplication. Default 24h.
	CallRecordTTL time.Duration
	// AckWait is how long a call's delivery may go without a heartbeat
	// before JetStream gives it to another runner (the runner that took it
	// died); heartbeats go every third of it. Default 15s.
	AckWait time.Duration
	// ShutdownGrace is how long calls in flight may finish once Run's
	// context ends; then they are cancelled, and a call waiting for a
	// person's answer is handed to another runner. Default 30s.
	ShutdownGrace time.Duration
	// LeaseTTL is how long a global concurrency slot outlives a runner that
	// died holding it (KVLimits). Default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// AuditBuffer is how many audit records may wait for the bus. Default 1024.
	AuditBuffer int
	// NoticeChannel is the Slack conversation id (C…, G… or D…) auto-disable and re-enable
	// notices are posted in; empty posts them nowhere (they still go on
	// system.toolrunner).
	NoticeChannel string
	// WatchConfig reloads the runner when the mcp.json at Tools.ConfigPath
	// changes (ConfigWatcher), substituting with ConfigOptions.
	WatchConfig   bool
	ConfigOptions mcpconfig.Options
	// Sealer encrypts the OAuth grants in the token bucket (TokenBucket),
	// shared with every process on the bus; nil: no OAuth logins (remote
	// servers that ask for one stay in needs_login).
	Sealer *tools.Sealer
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	c.Consumer = cmp.Or(c.Consumer, "toolrunner")
	c.Concurrency = config.Positive(c.Concurrency, 25)
	c.CallRecordTTL = config.Positive(c.CallRecordTTL, 24*time.Hour)
	c.AckWait = config.Positive(c.AckWait, 15*time.Second)
	c.AuditBuffer = config.Positive(c.AuditBuffer, 1024)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a configuration the service cannot run with.
func (c *Config) Validate() error {
	if c.CallRecordTTL < time.Minute {
		return fmt.Errorf("toolrunner: call record TTL %s must be at least 1m", c.CallRecordTTL)
	}
	return nil
}

// Service is the running tool runner worker. Run it once.
type Service struct {
	cfg    Config
	log    *slog.Logger
	bus    *bus.Bus
	runner *tools.Runner
	state  *KVState
	calls  jetstream.KeyValue
	rounds *KVRounds
	tasks  *KVTasks
	// results holds replies too large for one bus message (results.go).
	results jetstream.ObjectStore
	audits  chan tools.Record
}

// New opens the state and call buckets and builds the runner (not started).
func New(ctx context.Context, cfg Config, b *bus.Bus) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: cfg.Logger, bus: b, audits: make(chan tools.Record, cfg.AuditBuffer)}
	st, err := OpenState(ctx, b)
	if err != nil {
		return nil, err
	}
	s.state = st
	s.calls, err = b.OpenBucket(ctx, CallBucket(b.Prefix()), "relay tool runner: tool calls claimed and completed, for de-duplication", cfg.CallRecordTTL)
	if err != nil {
		return nil, err
	}
	if err := s.openResults(ctx); err != nil {
		return nil, err
	}
	limits, err := OpenLimits(ctx, b, cfg.LeaseTTL, cfg.Logger)
	if err != nil {
		return nil, err
	}
	s.rounds, err = OpenRounds(ctx, b, cfg.CallRecordTTL)
	if err != nil {
		return nil, err
	}
	s.tasks, err = OpenTasks(ctx, b, cfg.CallRecordTTL)
	if err != nil {
		return nil, err
	}
	tc := cfg.Tools
	if cfg.Sealer != nil {
		tokens, err := OpenTokens(ctx, b, cfg.Sealer)
		if err != nil {
			return nil, err
		}
		tc.OAuth = &tools.OAuthConfig{Tokens: tokens}
	}
	tc.State = st
	tc.Limits = limits
	tc.Audit = s
	tc.Rounds = s.rounds
	tc.Tasks = s.tasks
	tc.Notify = s.notify
	if tc.Elicitor == nil {
		tc.Elicitor = tools.NewBusElicitor(b.Conn(), b.Prefix())
	}
	if tc.Logger == nil {
		tc.Logger = cfg.Logger
	}
	s.runner, err = tools.New(tc)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// CallBucket returns the call-record bucket name for a bus prefix.
func CallBucket(prefix string) string { return bucketName(prefix, "TOOLCALLS") }

// Runner is the service's runner (for in-process use such as the agent in
// `relay serve`): Tools, Call, Servers.
func (s *Service) Runner() *tools.Runner { return s.runner }

// Run starts the runner, answers tool list requests and consumes tool calls
// until ctx is cancelled; then it drains in-flight calls and stops the
// servers.
func (s *Service) Run(ctx context.Context) error {
	defer s.runner.Close()
	if err := s.runner.Start(ctx); err != nil {
		return err
	}
	stop, err := tools.Serve(ctx, s.bus.Conn(), s.bus.Prefix(), s.runner, s.log,
		tools.ValidateEndpoint(s.bus.Prefix(), s.cfg.Tools.ConfigPath, s.cfg.ConfigOptions))
	if err != nil {
		return err
	}
	defer func() {
		if err := stop(); err != nil {
			s.log.Warn("tool list service not stopped cleanly", "err", err)
		}
	}()
	var wg sync.WaitGroup
	if s.cfg.WatchConfig && s.cfg.Tools.ConfigPath != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &ConfigWatcher{Path: s.cfg.Tools.ConfigPath, Options: s.cfg.ConfigOptions, Logger: s.log, Servers: s.cfg.Tools.Servers,
				OnReload: func(res tools.ReloadResult, err error) {
					if !res.Changed() {
						return
					}
					// Other runners, the hooks workers and the agent cache
					// tool lists too.
					s.announceRefresh()
					if started := slices.Concat(res.Added, res.Restarted); len(started) > 0 {
						wg.Add(1) // the watcher's own count is held: Wait has not begun
						go func() { defer wg.Done(); s.announceWhenConnected(ctx, started) }()
					}
				}}
			if err := w.Run(ctx, s.runner); err != nil {
				s.log.Error("mcp.json is not watched: changes need a restart", "err", err)
			}
		}()
	}
	auditCtx, auditStop := context.WithCancel(context.WithoutCancel(ctx))
	wg.Add(1)
	go func() { defer wg.Done(); s.publishAudits(auditCtx) }()
	err = s.bus.Consume(ctx, bus.ConsumerConfig{
		Name:        s.cfg.Consumer,
		Subject:     envelope.SubjectToolCall,
		Concurrency: s.cfg.Concurrency,
		// A call may run for the 5-minute budget maximum; heartbeats (every
		// 5 s) keep it, and a dead runner's call comes back within 15 s.
		AckWait:       s.cfg.AckWait,
		ShutdownGrace: s.cfg.ShutdownGrace,
	}, bus.HandlerFunc(s.Handle))
	auditStop()
	wg.Wait()
	return err
}

// announceRefresh tells every holder of a tool list (the other runners, the
// hooks workers, the agent) to drop it: a reload changed the servers.
func (s *Service) announceRefresh() {
	if err := tools.AnnounceRefresh(s.bus.Conn(), s.bus.Prefix()); err != nil {
		s.log.Warn("mcp.json reloaded; the other tool runners, hooks workers and the agent were not told", "err", err)
	}
}

// announceWhenConnected announces again once the servers a reload started
// have finished their first connect attempt (their tools are listed then):
// a list taken in between lacked them. It gives up after the runner's
// connect timeout plus a margin, or when ctx ends.
func (s *Service) announceWhenConnected(ctx context.Context, started []string) {
	ctx, cancel := context.WithTimeout(ctx, s.runnerConnectTimeout()+10*time.Second)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		pending := s.runner.Pending()
		if !slices.ContainsFunc(started, func(n string) bool { return slices.Contains(pending, n) }) {
			s.announceRefresh()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// runnerConnectTimeout is the runner's bound on one handshake.
func (s *Service) runnerConnectTimeout() time.Duration {
	return cmp.Or(s.cfg.Tools.ConnectTimeout, 30*time.Second)
}

// callRecord is what the call bucket holds per call envelope id.
type callRecord struct {
	State string `json:"state"` // "running" or "done"
	// Seq is the stream sequence of the message that claimed the call.
	Seq   uint64          `json:"seq"`
	Reply json.RawMessage `json:"reply,omitempty"`
	At    time.Time       `json:"at"`
}

// ErrNoToolCall marks an envelope on tool.call without a tool_call.
var ErrNoToolCall = errors.New("envelope has no tool_call to run")

// Handle runs one tool-call envelope. Tool failures are answered on
// tool.failed and acked; only bus or bucket failures return a transient
// error (redelivery), and malformed calls a permanent one (dead letter).
func (s *Service) Handle(ctx context.Context, m *bus.Message) error {
	call := m.Envelope
	if call.ToolCall == nil || call.ToolCall.Name == "" {
		return bus.Permanent(fmt.Errorf("%s: %w", call.ID, ErrNoToolCall))
	}
	if call.ToolCall.Result != nil {
		return bus.Permanent(fmt.Errorf("%s: tool_call already has a result", call.ID))
	}
	log := s.log.With("envelope_id", call.ID, "tool", call.ToolCall.Name, "thread", call.Meta.Thread)
	key := call.ID
	rec, err := s.claim(ctx, key, m.StreamSeq)
	if err != nil {
		return err
	}
	var reply *envelope.Envelope
	switch rec.State {
	case "done":
		reply, err = envelope.Parse(rec.Reply)
		if err != nil {
			return bus.Permanent(fmt.Errorf("stored reply of %s: %w", key, err))
		}
		log.Info("redelivered call already ran; republishing its result")
	case "running":
		if rec.Seq != m.StreamSeq && m.Header.Get(bus.HeaderReplayFor) == "" {
			// The same envelope published twice: the delivery that claimed it
			// owns it and publishes the one result (the same Nats-Msg-Id).
			log.Info("duplicate of a call in progress; leaving it to its owner", "owner_seq", rec.Seq)
			return nil
		}
		// JetStream redelivered the message whose earlier delivery claimed
		// the call and never finished, or an operator replayed its dead
		// letter (that delivery will not come back): the call may or may
		// not have reached the server. One that stopped while a person
		// answered its server's question resumes that round.
		pending, err := s.rounds.pending(ctx, call.ID)
		if err != nil {
			return err
		}
		if !pending {
			// A call whose MCP task was running polls that task again.
			if pending, err = s.tasks.pending(ctx, call.ID); err != nil {
				return err
			}
		}
		if pending {
			log.Info("resuming the input-required round or the task of an interrupted attempt")
			if reply, err = s.run(ctx, call, true); err != nil {
				return err
			}
			break
		}
		if !s.runner.Safe(ctx, call.ToolCall.Name) {
			reply = s.unknownOutcome(call)
			log.Warn("earlier attempt was interrupted; not repeating a tool with side effects")
			break
		}
		fallthrough
	default:
		if reply, err = s.run(ctx, call, rec.State == "running"); err != nil {
			return err
		}
	}
	if err := s.complete(ctx, key, reply); err != nil {
		return err
	}
	subject := envelope.SubjectToolResult
	if st, _ := reply.ToolCall.Result["status"].(string); st != string(tools.StatusSuccess) {
		subject = envelope.SubjectToolFailed
	}
	if _, err := s.bus.Publish(ctx, subject, reply, bus.WithMsgID("tool-result-"+call.ID)); err != nil {
		return fmt.Errorf("publish result of %s: %w", call.ID, err)
	}
	return nil
}

// run calls the tool of call. A call interrupted while a person answers
// its server's question (tools.ErrInterrupted) is not answered: its
// delivery is retried at once, by whichever runner takes it, and resumes.
func (s *Service) run(ctx context.Context, call *envelope.Envelope, resume bool) (*envelope.Envelope, error) {
	req := request(call)
	req.Resume = resume
	req.TaskStatus = s.progress(ctx, call)
	res := s.runner.Call(ctx, req)
	if errors.Is(res.Err, tools.ErrInterrupted) {
		return nil, bus.RetryAfter(fmt.Errorf("call %s: %w", call.ID, res.Err), time.Millisecond)
	}
	s.askConnect(ctx, call, res) // a per-user server the person has not connected (principal.go)
	return s.fit(ctx, call, s.reply(call, res))
}

// claim returns the call's record, creating a "running" one owned by the
// stream message seq when there is none.
func (s *Service) claim(ctx context.Context, key string, seq uint64) (callRecord, error) {
	b, _ := json.Marshal(callRecord{State: "running", Seq: seq, At: time.Now().UTC()})
	if _, err := s.calls.Create(ctx, key, b); err == nil {
		return callRecord{State: "new"}, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return callRecord{}, fmt.Errorf("claim call %s: %w", key, err)
	}
	e, err := s.calls.Get(ctx, key)
	if err != nil {
		return callRecord{}, fmt.Errorf("read call %s: %w", key, err)
	}
	var rec callRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return callRecord{State: "running", Seq: seq}, nil
	}
	return rec, nil
}

func (s *Service) complete(ctx context.Context, key string, reply *envelope.Envelope) error {
	raw, err := reply.Marshal()
	if err != nil {
		return bus.Permanent(err)
	}
	b, _ := json.Marshal(callRecord{State: "done", Reply: raw, At: time.Now().UTC()})
	if _, err := s.calls.Put(ctx, key, b); err != nil {
		return fmt.Errorf("record call %s: %w", key, err)
	}
	return nil
}

// request builds the runner's request from a call envelope. The caller is
// meta "agent": {"id": ..., "role": ...}; meta "run_id", when set (a
// code-block run sets its thread key), is the audit run id.
func request(call *envelope.Envelope) tools.Request {
	return tools.Request{
		CallID: call.ID,
		Tool:   call.ToolCall.Name,
		Args:   call.ToolCall.Args,
		Caller: CallerOf(call),
		TaskID: call.Meta.TaskID,
		Thread: call.Meta.Thread,
		Actor:  actorOf(call),
		RunID:  call.Meta.GetString("run_id"),
		// Elicitation and sampling (elicit.go).
		ActsFor:     ActsFor(call),
		TokenBudget: tokensLeft(call),
		Principal:   PrincipalOf(call),
	}
}

// actorOf is the person the call runs for: meta "actor" when the caller says
// so (a code-block run: "slack:U…", "github:login"), else the person whose
// webhook led to the call, if known.
func actorOf(call *envelope.Envelope) string {
	if v, ok := call.Meta.Get("actor"); ok {
		if a, _ := v.(string); a != "" {
			return a
		}
	}
	if call.Meta.Source != nil {
		return call.Meta.Source.Actor
	}
	return ""
}

// CallerOf reads meta "agent": {"id", "role"} of an envelope.
func CallerOf(e *envelope.Envelope) tools.Caller {
	v, _ := e.Meta.Get("agent")
	m, _ := v.(map[string]any)
	id, _ := m["id"].(string)
	role, _ := m["role"].(string)
	return tools.Caller{AgentID: id, Role: role}
}

// reply builds the tool envelope answering call.
func (s *Service) reply(call *envelope.Envelope, res *tools.Result) *envelope.Envelope {
	content := res.Text
	if res.Err != nil {
		content = "tool " + call.ToolCall.Name + " failed: " + res.Err.Error()
	}
	return s.envelopeFor(call, content, res.Map(), res.AuditID)
}

func (s *Service) unknownOutcome(call *envelope.Envelope) *envelope.Envelope {
	msg := "an earlier attempt of this call was interrupted; it may or may not have run, and the tool is not read-only or idempotent, so it was not repeated"
	return s.envelopeFor(call, "tool "+call.ToolCall.Name+" failed: "+msg,
		map[string]any{"status": string(tools.StatusError), "error": msg, "redacted": false}, "")
}

func (s *Service) envelopeFor(call *envelope.Envelope, content string, result map[string]any, auditID string) *envelope.Envelope {
	out := call.Reply(call.Channel, envelope.RoleTool, content)
	out.ToolCall = &envelope.ToolCall{ID: call.ToolCall.ID, Name: call.ToolCall.Name, Args: call.ToolCall.Args, Result: result}
	out.Meta.Set("in_reply_to", call.ID)
	if a, ok := call.Meta.Get("agent"); ok {
		out.Meta.Set("agent", a)
	}
	if auditID != "" {
		out.Meta.Set("audit_id", auditID)
	}
	return out
}

// Audit implements tools.AuditSink: records wait in a buffer for the bus;
// when it is full they are dropped (the JSONL file still has them).
func (s *Service) Audit(_ context.Context, r tools.Record) {
	select {
	case s.audits <- r:
	default:
		s.log.Warn("audit buffer full; record kept only in the audit log", "audit_id", r.ID)
	}
}

func (s *Service) publishAudits(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			// Flush what is buffered, briefly.
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for {
				select {
				case r := <-s.audits:
					s.publishAudit(fctx, r)
				default:
					return
				}
			}
		case r := <-s.audits:
			s.publishAudit(ctx, r)
		}
	}
}

func (s *Service) publishAudit(ctx context.Context, r tools.Record) {
	e := AuditEnvelope(r)
	if _, err := s.bus.Publish(ctx, SubjectAudit, e, bus.WithMsgID("audit-"+r.ID)); err != nil {
		s.log.Warn("audit record not published; kept in the audit log", "audit_id", r.ID, "err", err)
	}
}

// AuditEnvelope wraps an audit record in a system envelope (channel
// internal, meta.audit holding the record).
func AuditEnvelope(r tools.Record) *envelope.Envelope {
	e := envelope.New(envelope.ChannelInternal, envelope.RoleSystem,
		fmt.Sprintf("tool audit: %s.%s %s", r.Server, r.Tool, r.Status))
	e.Meta.TaskID = r.TaskID
	e.Meta.Thread = r.Thread
	e.Meta.Encode("audit", r)
	return e
}

// notify announces an auto-disabled or re-enabled server, once per
// transition: the message ids come from the transition (kind, server and
// time), so a second runner seeing the same transition adds nothing.
func (s *Service) notify(ctx context.Context, n tools.Notice) {
	text := NoticeText(n)
	id := fmt.Sprintf("%s-%s-%d", n.Kind, n.Server, n.At.UnixNano())
	e := envelope.New(envelope.ChannelInternal, envelope.RoleSystem, text)
	e.Meta.Set("notice", map[string]any{"kind": n.Kind, "server": n.Server, "failures": n.Failures, "reason": n.Reason})
	if _, err := s.bus.Publish(ctx, SubjectNotice, e, bus.WithMsgID("notice-"+id)); err != nil {
		s.log.Error("server notice not published", "server", n.Server, "kind", n.Kind, "err", err)
	}
	if s.cfg.NoticeChannel == "" {
		return
	}
	h := envelope.New(envelope.ChannelInternal, envelope.RoleSystem, text)
	h.Meta.Set("notice", map[string]any{"kind": n.Kind, "server": n.Server})
	h.Meta.SetTarget(&envelope.Target{Channel: string(envelope.ChannelSlack), SlackCh: s.cfg.NoticeChannel})
	h.Meta.Set("idempotency_key", "mcp-notice:"+id)
	if _, err := s.bus.Publish(ctx, SubjectHumanNotice, h, bus.WithMsgID("human-notice-"+id)); err != nil {
		s.log.Error("server notice for Slack not published", "server", n.Server, "kind", n.Kind, "err", err)
	}
}

// NoticeText is what humans read about a server's transition.
func NoticeText(n tools.Notice) string {
	if n.Kind == tools.NoticeNeedsLogin && strings.Contains(n.Reason, tools.ConnectCommand(n.Server)) {
		return fmt.Sprintf(":key: MCP server %q connects each person's own account: each person runs `%s` once before using its tools.", n.Server, tools.ConnectCommand(n.Server))
	}
	if n.Kind == tools.NoticeNeedsLogin {
		return fmt.Sprintf(":key: MCP server %q needs an OAuth login before its tools can be used. Run `%s`.", n.Server, tools.LoginCommand(n.Server))
	}
	if n.Kind == tools.NoticeReenabled {
		return fmt.Sprintf(":white_check_mark: MCP server %q is enabled again (%s); the tool runner is reconnecting it.", n.Server, n.Reason)
	}
	return fmt.Sprintf(":warning: MCP server %q was auto-disabled after %d failed health checks (last error: %s). Re-enable it with `relay mcp enable %s`.",
		n.Server, n.Failures, clip.Line(n.LastError, 300), n.Server)
}

// Ready reports an error naming the enabled servers whose first connect
// attempt has not finished (the tool runner's /readyz check).
func (s *Service) Ready(context.Context) error {
	if p := s.runner.Pending(); len(p) > 0 {
		return fmt.Errorf("mcp servers still starting: %s", strings.Join(p, ", "))
	}
	return nil
}
