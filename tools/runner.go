// Package tools is the relay's MCP client side: it runs the servers of
// mcp.json (stdio processes and remote streamable-HTTP or SSE servers), one
// long-lived session each, and executes tool calls on them under the policy's
// role capabilities, budgets and global limits, behind a circuit breaker per
// server, with health checks, result redaction and an append-only audit log.
//
// A Runner is the whole of it:
//
//	r, err := tools.New(tools.Config{Servers: servers, Policy: policy, AuditPath: "data/audit/tools.jsonl"})
//	r.Start(ctx)
//	defer r.Close()
//	res := r.Call(ctx, tools.Request{Tool: "github.get_issue", Args: args, Caller: tools.Caller{Role: "triage"}})
//
// Package mcpconfig parses the files; services/toolrunner connects a Runner
// to the bus.
package tools

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Config configures a Runner. Zero fields take the documented defaults.
type Config struct {
	// Servers are the mcp.json entries.
	Servers []mcpconfig.Server
	// Policy holds roles, budgets and limits; nil is mcpconfig.DefaultPolicy
	// (nothing allowed).
	Policy *mcpconfig.Policy
	// AuditPath is the JSONL audit log; empty writes no file (Audit may still be set).
	AuditPath string
	// Audit receives every record too (the bus); optional.
	Audit AuditSink
	// Notify is told when a server is auto-disabled; optional.
	Notify func(ctx context.Context, n Notice)
	// State persists enable/disable and the stop switch across processes; optional.
	State StateStore
	// Limits counts the session limits and daily quotas and holds the
	// global concurrency slots and the active executions; nil keeps them in
	// this process (NewMemoryLimits). services/toolrunner shares them on the bus.
	Limits LimitStore
	// Process, when set, names the process this runner is part of when it
	// takes no cancels over NATS ("relay mcp call (pid 42 on host-a)"): its
	// executions carry it (Execution.Process), and a cancel sent to the tool
	// runners says where the execution runs instead of forwarding it.
	Process string
	// Redactor removes secrets from results; nil removes token shapes only.
	Redactor *Redactor
	// BaseEnv is the environment every stdio server starts with (plus its own
	// env). Default: BaseEnvFrom(os.Environ()).
	BaseEnv []string
	// HTTPClient reaches remote servers; default http.DefaultClient.
	HTTPClient *http.Client
	// OAuth authorizes to remote servers that ask for OAuth (oauth.go); nil
	// leaves such servers in state needs_login.
	OAuth *OAuthConfig

	// HealthInterval is the ping interval. Default 30s.
	HealthInterval time.Duration
	// HealthBackoff are the delays of the retries after the 1st, 2nd, ...
	// consecutive failed check (the last repeats). Default 1s, 5s, 15s.
	HealthBackoff []time.Duration
	// DisableAfter consecutive failed checks auto-disable the server (a
	// handshake that succeeds does not reset the count, a good ping on the
	// session does). Default 3: with the default backoff the retries wait 1s
	// and 5s, and 15s is reached only when DisableAfter is higher.
	DisableAfter int
	// PingTimeout bounds one ping. Default 10s (at most HealthInterval).
	PingTimeout time.Duration
	// ConnectTimeout bounds a handshake and a tool listing. Default 30s.
	ConnectTimeout time.Duration
	// StreamRetries bounds a streamable HTTP session's reconnects of its
	// event streams without progress (the SDK waits the server's SSE retry
	// delay and sends Last-Event-ID). Default 5; negative never reconnects.
	StreamRetries int
	// StderrLevel is the level stdio servers' stderr lines are logged at.
	// Default Info; the CLI logs them at Debug (shown with -v).
	StderrLevel slog.Level
	// ConfigPath is the mcp.json this runner read, reported by status.
	ConfigPath string
	// Invalid are the entries of ConfigPath that did not validate, reported
	// by status (SetInvalid replaces them on reload).
	Invalid []InvalidEntry
	// TerminateDuration is how long a stdio server gets to exit after its
	// stdin closes before SIGTERM. Default 2s.
	TerminateDuration time.Duration
	// BreakerFailures consecutive failures open a server's breaker (a broken
	// session opens it at once). Default 3.
	BreakerFailures int
	// BreakerOpen is how long a breaker stays open before a trial call. Default 30s.
	BreakerOpen time.Duration
	// ToolsTTL is how long a tool list is cached unless the server sends
	// ttlMs. Default 5m.
	ToolsTTL time.Duration
	// CallRetries is how many times a call that reached the server is
	// repeated where that is safe (a read-only or idempotent tool whose
	// connection broke). Default 2; negative disables retries.
	CallRetries int
	// RetryBackoff is the delay before the first retry, growing after (up to
	// 2s). Default 250ms.
	RetryBackoff time.Duration
	// RetryWindow bounds how long a call keeps retrying while its server is
	// offline (a stdio server restarting after a crash takes about 1.5s to be
	// back). Default 5s; the call's own timeout still applies.
	RetryWindow time.Duration

	// Elicitor asks humans what servers request during calls (elicitation);
	// nil, or its ErrNoHuman, applies the schema's defaults or declines.
	Elicitor Elicitor
	// ElicitTimeout bounds the wait for a human's answer (a timeout declines);
	// the call's own timeout bounds it too. Default 5m.
	ElicitTimeout time.Duration
	// MaxQuestions caps the elicitation questions one tool call may ask
	// (RELAY_LIMIT_QUESTIONS_PER_CALL); beyond it the server gets "cancel"
	// with a note in _meta and nobody is asked. Default DefaultMaxQuestions.
	MaxQuestions int
	// Sampler answers servers' sampling requests; nil refuses them.
	Sampler Sampler
	// Rounds keeps the pending input-required rounds of 2026-07-28 calls
	// (rounds.go), so a call interrupted while a person answers resumes in
	// whichever runner takes its redelivery; nil keeps them only in the
	// call's memory.
	Rounds RoundStore
	// Tasks keeps the tasks of calls in flight (tasks.go), so a call
	// interrupted while its task runs polls the same task in whichever
	// runner takes its redelivery; nil keeps them only in the call's memory.
	Tasks TaskStore

	// ClientName and ClientVersion are sent in the handshake. Default "relay", "dev".
	ClientName, ClientVersion string
	// Logger; nil discards. SDKLogger, when set, logs the MCP SDK's internals.
	Logger    *slog.Logger
	SDKLogger *slog.Logger
	// Registerer receives the metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Now is the clock of daily quotas; default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Policy == nil {
		c.Policy = mcpconfig.DefaultPolicy()
	}
	if c.Redactor == nil {
		c.Redactor = NewRedactor()
	}
	if c.Limits == nil {
		c.Limits = NewMemoryLimits()
	}
	if c.BaseEnv == nil {
		c.BaseEnv = BaseEnvFrom(os.Environ())
	}
	c.HealthInterval = config.Positive(c.HealthInterval, 30*time.Second)
	if c.HealthBackoff == nil {
		c.HealthBackoff = []time.Duration{time.Second, 5 * time.Second, 15 * time.Second}
	}
	c.DisableAfter = config.Positive(c.DisableAfter, 3)
	c.StreamRetries = cmp.Or(c.StreamRetries, 5)
	c.PingTimeout = config.Positive(c.PingTimeout, min(10*time.Second, c.HealthInterval))
	c.ConnectTimeout = config.Positive(c.ConnectTimeout, 30*time.Second)
	c.TerminateDuration = config.Positive(c.TerminateDuration, 2*time.Second)
	c.BreakerFailures = config.Positive(c.BreakerFailures, 3)
	c.BreakerOpen = config.Positive(c.BreakerOpen, 30*time.Second)
	c.ToolsTTL = config.Positive(c.ToolsTTL, 5*time.Minute)
	c.CallRetries = cmp.Or(c.CallRetries, 2)
	c.RetryBackoff = config.Positive(c.RetryBackoff, 250*time.Millisecond)
	c.RetryWindow = config.Positive(c.RetryWindow, 5*time.Second)
	c.ElicitTimeout = config.Positive(c.ElicitTimeout, 5*time.Minute)
	c.MaxQuestions = config.Positive(c.MaxQuestions, DefaultMaxQuestions)
	c.ClientName = cmp.Or(c.ClientName, "relay")
	c.ClientVersion = cmp.Or(c.ClientVersion, "dev")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration the runner cannot run with.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for _, s := range c.Servers {
		if seen[s.Name] {
			return fmt.Errorf("server %q listed twice", s.Name)
		}
		seen[s.Name] = true
	}
	if len(c.HealthBackoff) == 0 {
		return errors.New("health backoff: at least one delay")
	}
	for _, d := range c.HealthBackoff {
		if d <= 0 {
			return fmt.Errorf("health backoff %s: must be positive", d)
		}
	}
	if c.Policy.Limits.Concurrency < 1 {
		return fmt.Errorf("policy limits.concurrency %d: must be at least 1", c.Policy.Limits.Concurrency)
	}
	return nil
}

// Notice kinds.
const (
	NoticeAutoDisabled = "server_auto_disabled"
	NoticeReenabled    = "server_reenabled"
)

// Notice tells a human something happened to a server: it was
// auto-disabled, or a server the health checks had disabled was enabled
// again. One is sent per transition.
type Notice struct {
	// Kind is NoticeAutoDisabled or NoticeReenabled.
	Kind   string
	Server string
	Reason string
	// At is when the transition happened (the persisted state's time; with
	// the kind and server it identifies the transition across processes).
	At time.Time
	// Failures is how many consecutive checks failed.
	Failures int
	// LastError is the last check's error.
	LastError string
}

// Runner runs the configured servers and executes calls on them. It is safe
// for concurrent use. Start it once; Close stops every server.
type Runner struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	budgets  *budgets
	redactor *Redactor
	progress *progressRouter
	audit    *AuditLog

	conns   map[string]*conn
	order   []string
	invalid atomic.Pointer[[]InvalidEntry]
	// connsMu guards conns, order and the fields Reload (reload.go) uses.
	connsMu sync.RWMutex

	// stateMu serialises taking persisted server states (applyState, and
	// Reload for the servers it starts); it is taken before connsMu.
	// servers is the last state known per server, never modified in place.
	stateMu sync.Mutex
	servers map[string]ServerState
	live    liveConns

	stopPolicy bool
	stopState  atomic.Bool
	stopManual atomic.Bool
	closing    atomic.Bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
	// closers are the sessions a switch closes in the background.
	closers sync.WaitGroup
	// applied, when set (tests), sees every state the watch applied.
	applied func(State)

	// id names this runner in the executions it registers (Execution.Owner).
	id string
	// execs are the executions running here, by id (Cancel).
	execsMu sync.Mutex
	execs   map[string]*running

	// modes are the tools' execution.taskSupport (taskwire.go); held the
	// HTTP sessions holding tasks this runner polls (tasks.go).
	modes  toolModes
	heldMu sync.Mutex
	held   map[string]int
}

// New builds a Runner (opening the audit log) without connecting anything.
func New(cfg Config) (*Runner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runner{
		cfg:        cfg,
		log:        cfg.Logger,
		metrics:    newMetrics(cfg.Registerer),
		budgets:    newBudgets(cfg.Policy, cfg.Limits, cfg.Now),
		id:         uuid.NewString(),
		execs:      map[string]*running{},
		redactor:   cfg.Redactor,
		progress:   &progressRouter{},
		conns:      map[string]*conn{},
		stopPolicy: cfg.Policy.Limits.Stop,
	}
	for _, s := range cfg.Servers {
		r.conns[s.Name] = newConn(r, s)
		r.order = append(r.order, s.Name)
	}
	if cfg.AuditPath != "" {
		a, err := OpenAuditLog(cfg.AuditPath)
		if err != nil {
			return nil, err
		}
		a.OnError(func(err error, lines int) {
			r.log.Error("audit log write failed", "records", lines, "err", err)
		})
		r.audit = a
	}
	return r, nil
}

// Start applies the persisted state, starts every enabled server's health
// loop (its first check connects) and watches the state store. It does not
// wait for the servers; use WaitReady for that. ctx bounds the runner's life
// (Close stops it too).
func (r *Runner) Start(ctx context.Context) error {
	ctx, r.cancel = context.WithCancel(ctx)
	r.setLife(ctx)
	if r.cfg.State != nil {
		st, err := r.cfg.State.Load(ctx)
		if err != nil {
			r.cancel()
			return fmt.Errorf("load tool runner state: %w", err)
		}
		r.applyState(st)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.cfg.State.Watch(ctx, r.applyState); err != nil && ctx.Err() == nil {
				r.log.Error("state watch ended; enable/disable from other processes is not seen", "err", err)
			}
		}()
	}
	for _, c := range r.list() {
		r.startConn(c)
	}
	return nil
}

// applyState takes a persisted state: servers with an entry follow it, the
// stop switch follows it. The servers' entries are kept for the servers a
// later Reload starts.
func (r *Runner) applyState(st State) {
	r.stopState.Store(st.Stop)
	var notices []Notice
	r.stateMu.Lock()
	prev := r.servers
	r.servers = st.Servers
	for name, s := range st.Servers {
		if old, ok := prev[name]; ok && old.same(s) {
			// Unchanged (the watch reports the whole state on every change):
			// applying it again would reset the server's failure count.
			continue
		}
		if c := r.conn(name); c != nil {
			if n, ok := applyServerState(c, s); ok {
				notices = append(notices, n)
			}
		}
	}
	r.stateMu.Unlock()
	for _, n := range notices {
		r.notify(context.Background(), n)
	}
	if r.applied != nil {
		r.applied(st)
	}
}

// applyServerState makes c follow its persisted state s; it returns the
// notice of a server the health checks had disabled and s enables again.
func applyServerState(c *conn, s ServerState) (Notice, bool) {
	if s.Disabled {
		c.disable(s.Reason, s.By)
		return Notice{}, false
	}
	if c.enable() != "health" {
		return Notice{}, false
	}
	return Notice{Kind: NoticeReenabled, Server: c.cfg.Name, At: s.At,
		Reason: fmt.Sprintf("enabled again by %s", cmp.Or(s.By, "an operator"))}, true
}

// rememberServer records a server state this runner set itself (Enable,
// Disable, an auto-disable), so a Reload before the state store's watch
// reports it already applies it.
func (r *Runner) rememberServer(name string, s ServerState) {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	servers := maps.Clone(r.servers)
	if servers == nil {
		servers = map[string]ServerState{}
	}
	servers[name] = s
	r.servers = servers
}

func (r *Runner) notify(ctx context.Context, n Notice) {
	if r.cfg.Notify != nil {
		r.cfg.Notify(ctx, n)
	}
}

// Pending lists the enabled servers whose first connect attempt has not
// finished yet (readiness: until it is empty, a tool list may be partial).
func (r *Runner) Pending() []string {
	var out []string
	for _, c := range r.list() {
		if !c.firstAttemptDone() {
			out = append(out, c.cfg.Name)
		}
	}
	return out
}

// WaitReady blocks until every enabled server is ready or ctx ends, and
// returns the servers that are not ready.
func (r *Runner) WaitReady(ctx context.Context) []string {
	for {
		var pending []string
		for _, s := range r.Servers() {
			if s.State != StateReady && s.State != StateDisabled {
				pending = append(pending, s.Name)
			}
		}
		if len(pending) == 0 {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return pending
		case <-t.C:
		}
	}
}

// Close stops the health loops and every session (stdio servers exit) and
// closes the audit log. In-flight calls fail with a connection error.
func (r *Runner) Close() error {
	if !r.closing.CompareAndSwap(false, true) {
		return nil
	}
	if r.cancel != nil {
		r.cancel()
	}
	var wg sync.WaitGroup
	for _, c := range r.list() {
		wg.Add(1)
		go func() { defer wg.Done(); c.close() }()
	}
	wg.Wait()
	r.wg.Wait()
	// A hostile server may never let its session close; Close does not
	// wait for it past closeGrace.
	closed := make(chan struct{})
	go func() { r.closers.Wait(); close(closed) }()
	grace := time.NewTimer(closeGrace)
	select {
	case <-closed:
	case <-grace.C:
		r.log.Warn("sessions of disabled servers still closing; not waiting for them", "after", closeGrace)
	}
	grace.Stop()
	if r.audit != nil {
		return r.audit.Close()
	}
	return nil
}

// closeGrace bounds Close's wait for sessions a switch is closing.
const closeGrace = 5 * time.Second

// closeInBackground closes a session a switch ended; Close waits for it.
func (r *Runner) closeInBackground(s *mcp.ClientSession) {
	r.closers.Go(func() { _ = s.Close() })
}

// ServerStatus is one server's health, as `relay mcp list` shows it.
type ServerStatus struct {
	Name string `json:"name"`
	// DisplayName is the mcp.json key when it differs from Name (a
	// gallery name, a name with spaces).
	DisplayName string `json:"display_name,omitempty"`
	Type        string `json:"type"`
	Description string `json:"description,omitempty"`
	// Capabilities and SchemaVersion are what the mcp.json entry declares
	// (the agent orchestrator's fields), shown and not enforced.
	Capabilities  []string `json:"capabilities,omitempty"`
	SchemaVersion string   `json:"schema_version,omitempty"`
	// State is connecting, ready, degraded, offline, needs_login or disabled.
	State          string `json:"state"`
	DisabledReason string `json:"disabled_reason,omitempty"`
	DisabledBy     string `json:"disabled_by,omitempty"`
	// Breaker is closed, half-open or open; BreakerOpened counts openings.
	Breaker       string `json:"breaker"`
	BreakerOpened int    `json:"breaker_opened,omitempty"`
	// Failures counts consecutive failed health checks.
	Failures  int       `json:"failures"`
	LastError string    `json:"last_error,omitempty"`
	LastCheck time.Time `json:"last_check,omitzero"`
	// LastConnected is the last successful handshake; LastPing the last
	// successful ping and PingLatency its round trip.
	LastConnected time.Time     `json:"last_connected,omitzero"`
	LastPing      time.Time     `json:"last_ping,omitzero"`
	PingLatency   time.Duration `json:"ping_latency_ns,omitempty"`
	// NextRetry is when a failed check is retried; AutoDisabledAt when the
	// health checks disabled the server.
	NextRetry      time.Time `json:"next_retry,omitzero"`
	AutoDisabledAt time.Time `json:"auto_disabled_at,omitzero"`
	// Invocations counts calls on the server since start (Successes +
	// Errors); AvgLatency is the mean of the last 100.
	Invocations     int64         `json:"invocations"`
	Successes       int64         `json:"successes"`
	Errors          int64         `json:"errors"`
	LastInvocation  time.Time     `json:"last_invocation,omitzero"`
	AvgLatency      time.Duration `json:"avg_latency_ns,omitempty"`
	Handshake       time.Duration `json:"handshake_ns,omitempty"`
	ProtocolVersion string        `json:"protocol_version,omitempty"`
	ServerName      string        `json:"server_name,omitempty"`
	ServerVersion   string        `json:"server_version,omitempty"`
	// Tools is the size of the cached tool list, ToolNames its names and
	// ToolsListed when the server listed them (the hooks specification's
	// lastDiscovered); zero before the first list.
	Tools       int       `json:"tools"`
	ToolNames   []string  `json:"tool_names,omitempty"`
	ToolsListed time.Time `json:"tools_listed,omitzero"`
}

// Status is what a status request answers: every server, the stop switch,
// the servers still on their first attempt and the file the runner read.
func (r *Runner) Status() StatusResponse {
	return StatusResponse{Servers: r.Servers(), Stopped: r.Stopped(), Pending: r.Pending(), ConfigPath: r.cfg.ConfigPath, Invalid: r.Invalid()}
}

// Servers reports every server, in mcp.json order.
func (r *Runner) Servers() []ServerStatus {
	conns := r.list()
	out := make([]ServerStatus, 0, len(conns))
	for _, c := range conns {
		out = append(out, c.status())
	}
	return out
}

// Enable re-enables a server (resetting its failure count) and persists it.
func (r *Runner) Enable(ctx context.Context, name string) error {
	c := r.conn(name)
	if c == nil {
		return fmt.Errorf("enable %s: %w", name, ErrUnknownServer)
	}
	at := time.Now().UTC()
	if c.enable() == "health" {
		r.notify(ctx, Notice{Kind: NoticeReenabled, Server: name, At: at, Reason: "enabled again by an operator"})
	}
	ss := ServerState{Disabled: false, By: "operator", At: at}
	r.rememberServer(name, ss)
	if r.cfg.State != nil {
		return r.cfg.State.SetServer(ctx, name, ss)
	}
	return nil
}

// Disable stops a server and persists it.
func (r *Runner) Disable(ctx context.Context, name, reason string) error {
	c := r.conn(name)
	if c == nil {
		return fmt.Errorf("disable %s: %w", name, ErrUnknownServer)
	}
	c.disable(reason, "operator")
	ss := ServerState{Disabled: true, Reason: reason, By: "operator", At: time.Now().UTC()}
	r.rememberServer(name, ss)
	if r.cfg.State != nil {
		return r.cfg.State.SetServer(ctx, name, ss)
	}
	return nil
}

// SetStop sets this process's stop switch (the policy's and the state
// store's switches also stop execution).
func (r *Runner) SetStop(stop bool) { r.stopManual.Store(stop) }

// Stopped reports whether any stop switch is on.
func (r *Runner) Stopped() bool {
	return r.stopPolicy || r.stopState.Load() || r.stopManual.Load()
}

func (r *Runner) autoDisable(ctx context.Context, c *conn, failures int, err error) {
	reason := fmt.Sprintf("auto-disabled after %d failed health checks: %v", failures, err)
	if !c.disable(reason, "health") {
		return
	}
	at := time.Now().UTC()
	ss := ServerState{Disabled: true, Reason: reason, By: "health", At: at}
	r.rememberServer(c.cfg.Name, ss)
	if r.cfg.State != nil {
		if serr := r.cfg.State.SetServer(ctx, c.cfg.Name, ss); serr != nil {
			r.log.Error("persist auto-disable", "server", c.cfg.Name, "err", serr)
		}
	}
	r.notify(ctx, Notice{Kind: NoticeAutoDisabled, Server: c.cfg.Name, Reason: reason, At: at, Failures: failures, LastError: err.Error()})
}

// Tools lists the tools role may call, from every ready server, in server
// then tool order. Servers that cannot list are left out.
func (r *Runner) Tools(ctx context.Context, role string) []ToolInfo {
	return r.ToolsAt(ctx, role, mcpconfig.Location{})
}

// AllTools lists every tool of every ready server, unfiltered (operators).
func (r *Runner) AllTools(ctx context.Context, server string) ([]ToolInfo, error) {
	c := r.conn(server)
	if c == nil {
		return nil, fmt.Errorf("tools of %s: %w", server, ErrUnknownServer)
	}
	list, err := c.cachedTools(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ToolInfo, len(list))
	for i, e := range list {
		out[i] = e.info
	}
	return out, nil
}

// Caller is who asks for a call: the agent's id and role (from the
// envelope's meta "agent": {"id", "role"}).
type Caller struct {
	AgentID string `json:"id,omitempty"`
	Role    string `json:"role,omitempty"`
}

// ProgressEvent is a notifications/progress the server sent during a call.
type ProgressEvent struct {
	Progress, Total float64
	Message         string
	// Status and Task are set for a call that runs as a task (tasks.go):
	// the task's status and the server's task id; Message is its
	// statusMessage.
	Status, Task string
}

// Request is one tool call.
type Request struct {
	// CallID identifies the call (the tool-call envelope's id); it is
	// recorded in the audit log.
	CallID string
	// Tool is "<server>.<tool>".
	Tool string
	// Args are the tool's arguments.
	Args   map[string]any
	Caller Caller
	// TaskID and Thread are recorded in the audit log; Thread is the
	// session the policy's limits.perSession counts.
	TaskID, Thread string
	// RunID is the audit log's run id: the thread key of a code block, the
	// CLI invocation. Default: TaskID, else the execution id.
	RunID string
	// Actor is who the call runs for, as the audit log and `relay mcp
	// active` show it. Default: ActsFor, else Caller.AgentID.
	Actor string
	// ActsFor is the person the call acts for (a Slack user id), who answers
	// the server's questions; empty for an agent's task (an approver answers).
	ActsFor string
	// Principal is the person (a Slack user id) whose own connection a
	// per-user server ("oauth": {"per": "user"}) uses: the author of a code
	// block, the person whose event fired a hook, the approver of an
	// agent's tool step. Without one such a server refuses the call.
	Principal string
	// TokenBudget is how many tokens the task has left for the server's
	// sampling requests; 0 means no task budget applies.
	TokenBudget int
	// Operator skips the capability check (relay mcp call); budgets, the
	// stop switch and the audit log still apply.
	Operator bool
	// Progress, when set, receives the server's progress notifications and
	// the statuses of the call's task (tasks.go).
	Progress func(ProgressEvent)
	// TaskStatus, when set, receives the statuses of the call's task only
	// (setting it asks the server for no progress notifications).
	TaskStatus func(ProgressEvent)
	// Resume says an earlier attempt of this call (same CallID) may have
	// left an input-required round in Config.Rounds: the call continues it
	// instead of starting again (a redelivered call).
	Resume bool
}

// Result is the outcome of a call: on success the content, otherwise Err
// (a *CallError) too. Content and Structured are redacted.
type Result struct {
	Status Status
	// Content is the MCP content blocks as JSON objects.
	Content []any
	// Text joins the text blocks with newlines.
	Text string
	// Structured is the structuredContent, validated against the outputSchema.
	Structured any
	// Err is nil on success.
	Err error
	// Duration is the whole call, checks included.
	Duration time.Duration
	// Redacted says secrets were removed.
	Redacted bool
	// Attempts counts the sends tried (0 when refused before sending).
	Attempts int
	// AuditID is the id of the call's audit record.
	AuditID string
	// ExecutionID is the call's execution id (Request.CallID, else a fresh
	// UUID): what `relay mcp active` lists and `relay mcp cancel` takes.
	ExecutionID string
	// CancelledBy is who cancelled the execution (Runner.Cancel), if anyone.
	CancelledBy string
	// SamplingTokens are the LLM tokens the server's sampling requests used.
	SamplingTokens int
	// MCPTask is the server's task id when the call ran as a task.
	MCPTask string
	// since is when the call's task was created (a resumed call's began
	// in an earlier attempt): Duration counts from there.
	since time.Time
}

// Map is the result as tool_call.result: content, text, structured,
// status, redacted, duration_ms and, on failure, error (and cancelled_by
// when someone cancelled it).
func (res *Result) Map() map[string]any {
	m := map[string]any{
		"status":      string(res.Status),
		"duration_ms": float64(res.Duration.Microseconds()) / 1000,
		"redacted":    res.Redacted,
	}
	if res.Content != nil {
		m["content"] = res.Content
	}
	if res.Text != "" {
		m["text"] = res.Text
	}
	if res.Structured != nil {
		m["structured"] = res.Structured
	}
	if res.Err != nil {
		m["error"] = res.Err.Error()
	}
	if res.SamplingTokens > 0 {
		m["sampling_tokens"] = res.SamplingTokens
	}
	if res.CancelledBy != "" {
		m["cancelled_by"] = res.CancelledBy
	}
	return m
}

// Call runs one tool call and writes its audit record. It never panics on
// server behaviour; every failure is in Result.Err with its Status.
func (r *Runner) Call(ctx context.Context, req Request) *Result {
	start := time.Now()
	server, tool, _ := mcpconfig.SplitTool(req.Tool)
	e := r.newExecution(&req, server, tool, start)
	run := r.track(e.ID)
	// The connection is held from here to the audit record, so a Reload
	// that removes or replaces the server mid-call still counts the call
	// in that connection's statistics and redacts its error with that
	// server's secrets.
	var c *conn
	if server != "" {
		c = r.acquire(server)
	}
	if c != nil {
		defer r.release(c)
	}
	res := r.call(ctx, &req, e, run, c)
	run.untrack()
	res.ExecutionID, res.CancelledBy = e.ID, run.cancelledBy()
	res.Duration = time.Since(start)
	if !res.since.IsZero() && res.since.Before(start) {
		res.Duration = time.Since(res.since)
	}
	res.Status = StatusOf(res.Err)
	if res.Err != nil {
		res.Err = &CallError{Server: server, Tool: tool, Status: res.Status, Err: res.Err}
	}
	if c != nil {
		if res.Attempts > 0 {
			c.recordCall(start, res.Duration, res.Err == nil)
		}
		r.metrics.observe(server, tool, res.Status, res.Duration, res.Attempts > 0)
	}
	if errors.Is(res.Err, ErrInterrupted) {
		// No record: the call's redelivery resumes it and writes the one.
		return res
	}
	r.record(ctx, &req, e, res, c)
	return res
}

// auditPrefix makes the ids of elicitation questions unique across
// processes.
var auditPrefix = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// record writes the call's audit record; c is the server's connection, nil
// when the call named no configured server.
func (r *Runner) record(ctx context.Context, req *Request, e Execution, res *Result, c *conn) {
	server := e.Server
	rec := Record{
		ID:          newID(),
		Time:        time.Now().UTC(),
		ExecutionID: e.ID,
		RunID:       e.RunID,
		CallID:      req.CallID,
		TaskID:      req.TaskID,
		Thread:      req.Thread,
		AgentID:     req.Caller.AgentID,
		Actor:       e.Actor,
		Role:        req.Caller.Role,
		Server:      server,
		Tool:        e.Tool,
		CancelledBy: res.CancelledBy,
		ArgsSHA256:  ArgsHash(req.Args),
		Redacted:    res.Redacted,
		DurationMS:  float64(res.Duration.Microseconds()) / 1000,
		Status:      res.Status,
		Attempts:    res.Attempts,
		MCPTask:     res.MCPTask,
	}
	if req.Operator && rec.Role == "" {
		rec.Role = "operator"
	}
	if c != nil && PerUser(c.cfg) {
		rec.Principal = req.Principal
	}
	if res.Err != nil {
		red := r.redactor
		if c != nil {
			red = c.redactor
		}
		rec.Error, _ = red.String(res.Err.Error())
	}
	res.AuditID = rec.ID
	if r.audit != nil {
		if err := r.audit.Write(&rec); err != nil {
			r.log.Error("audit log write failed", "audit_id", rec.ID, "err", err)
		}
	}
	if r.cfg.Audit != nil {
		r.cfg.Audit.Audit(ctx, rec)
	}
}

// call runs the call on c, the connection Call acquired (nil when the
// server is unknown).
func (r *Runner) call(ctx context.Context, req *Request, e Execution, run *running, c *conn) (res *Result) {
	res = &Result{}
	server, tool := e.Server, e.Tool
	if res.Err = r.refuse(req, e, c); res.Err != nil {
		return res
	}
	if PerUser(c.cfg) {
		// The person's own session (peruser.go).
		if c, res.Err = c.forPrincipal(ctx, req.Principal); res.Err != nil {
			return res
		}
	}
	timeout := r.cfg.Policy.TimeoutOr(server, tool, c.cfg.Timeout)
	cctx, cancel := withCall(ctx, req, run, server, tool, timeout)
	defer cancel()
	ctx = cctx
	defer func() {
		res.SamplingTokens = int(cctx.f.tokens.Load())
		res.MCPTask, res.since = cctx.f.mcpTask, cctx.f.since
	}()

	entry, err := c.tool(ctx, tool)
	if errors.Is(err, ErrOffline) {
		entry, err = r.toolWhenBack(ctx, c, tool)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctxErr(ctx)
		}
		res.Err = err
		return res
	}
	if !req.Operator && !r.cfg.Policy.AllowedTool(req.Caller.Role, server, tool, entry.info.ReadOnly) {
		res.Err = fmt.Errorf("%w: role %s lacks capability %s.%s (the tool is %s)", ErrPermissionDenied, req.Caller.Role, server, tool, verbOf(entry.info.ReadOnly))
		return res
	}
	_, out := entry.schemas()
	if entry.schemaErr != nil {
		r.log.Warn("tool schema does not compile; not validating", "tool", entry.info.Name, "err", entry.schemaErr)
	}
	args := omitNullOptional(req.Args, entry.info.InputSchema)
	if err := entry.validateArgs(args); err != nil {
		res.Err = fmt.Errorf("%w: %v", ErrInvalidArguments, err)
		return res
	}
	slots, err := r.budgets.admit(ctx, e)
	if err != nil {
		res.Err = err
		return res
	}
	defer slots.release()

	var token string
	if req.Progress != nil {
		token = r.progress.add(req.Progress)
		defer r.progress.remove(token)
	}
	cr, err := r.retry(ctx, c, entry, tool, args, token, res)
	if err != nil {
		res.Err = err
		return res
	}
	c.fill(res, cr, out)
	return res
}

// refuse returns why the call cannot start, before its tool list is read:
// no such server, the caller's role lacks the capability, the runner is
// closing or stopped, or the server is disabled. nil lets it go on.
func (r *Runner) refuse(req *Request, e Execution, c *conn) error {
	server, tool := e.Server, e.Tool
	switch {
	case server == "":
		return fmt.Errorf("%w: %q is not <server>.<tool>", ErrUnknownTool, req.Tool)
	case c == nil:
		return fmt.Errorf("%w: %s", ErrUnknownServer, server)
	case !req.Operator && !r.cfg.Policy.Allowed(req.Caller.Role, server, tool):
		role := req.Caller.Role
		if role == "" {
			role = "(none)"
		}
		return fmt.Errorf("%w: role %s lacks capability %s.%s", ErrPermissionDenied, role, server, tool)
	case r.closing.Load():
		return ErrClosed
	case r.Stopped():
		return ErrStopped
	case c.isDisabled():
		return fmt.Errorf("%w: %s", ErrDisabled, server)
	}
	return nil
}

// callTimeout is the cause of a call's context ending at its time limit.
// Its message is built only when read, not on every call.
type callTimeout struct {
	limit        time.Duration
	server, tool string
}

func (e *callTimeout) Error() string {
	return fmt.Sprintf("the call's %s limit passed (the timeout of %s.%s: a policy budget, the server's \"timeout\", else %s)",
		e.limit, e.server, e.tool, mcpconfig.DefaultTimeout)
}

// timeoutError is ct as a call's error: its limit and where that is set.
func (r *Runner) timeoutError(ct *callTimeout) error {
	var def time.Duration
	if c := r.conn(ct.server); c != nil {
		def = c.cfg.Timeout
	}
	return fmt.Errorf("the call's %s limit passed (%s)", ct.limit, r.cfg.Policy.TimeoutSource(ct.server, ct.tool, def))
}

// retry sends the call, repeating it while that is safe: a call that never
// left the runner (the server is offline, restarting) is retried within
// RetryWindow; one that reached the server only when the tool is read-only
// or idempotent and the connection broke, at most CallRetries times. When a
// broken connection is followed by offline retries, the broken connection
// is what the call reports.
func (r *Runner) retry(ctx context.Context, c *conn, entry *toolEntry, tool string, args map[string]any, token string, res *Result) (*mcp.CallToolResult, error) {
	var lost error
	resent := 0
	op := func() (*mcp.CallToolResult, error) {
		cr, sent, err := r.invoke(ctx, c, entry, tool, args, token)
		if sent {
			res.Attempts++
		}
		switch {
		case err == nil:
			return cr, nil
		case ctx.Err() != nil || r.cfg.CallRetries < 0:
			return nil, backoff.Permanent(err)
		case !sent && errors.Is(err, ErrOffline):
			if lost != nil {
				return nil, fmt.Errorf("%w (the server was not back within %s)", lost, r.cfg.RetryWindow)
			}
			return nil, err
		case entry.safe() && errors.Is(err, ErrConnection) && resent < r.cfg.CallRetries:
			resent++
			lost = err
			return nil, err
		}
		return nil, backoff.Permanent(err)
	}
	// The first attempt runs before any retry machinery is built: most calls
	// succeed at once. A failed one is handed to the retry loop as its first
	// attempt (the retry window starts after it).
	cr, err := op()
	if err != nil {
		cr, err = r.retryAfter(ctx, op, cr, err)
	}
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrConnection) && !errors.Is(err, ErrInterrupted) {
		err = ctxErr(ctx)
	}
	return cr, err
}

// retryAfter continues a call whose first attempt (cr, err) failed: the
// backoff loop takes that outcome as its first attempt's and goes on
// calling op while the error is not permanent.
func (r *Runner) retryAfter(ctx context.Context, op backoff.Operation[*mcp.CallToolResult], cr *mcp.CallToolResult, err error) (*mcp.CallToolResult, error) {
	first := true
	again := func() (*mcp.CallToolResult, error) {
		if first {
			first = false
			return cr, err
		}
		return op()
	}
	return withinRetryWindow(ctx, r, again)
}

// withinRetryWindow calls op until it succeeds, fails permanently or the
// runner's RetryWindow has passed, with the delays of a call's retries.
func withinRetryWindow[T any](ctx context.Context, r *Runner, op backoff.Operation[T]) (T, error) {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     r.cfg.RetryBackoff,
		RandomizationFactor: 0.1,
		Multiplier:          2,
		MaxInterval:         2 * time.Second,
	}
	b.Reset()
	return backoff.Retry(ctx, op, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(r.cfg.RetryWindow), backoff.WithMaxTries(0))
}

// toolWhenBack is the entry of tool on c when c is offline and has no tool
// list to go by (it was dropped by a reload or outlived its TTL): it waits
// for the server to come back within RetryWindow, as a call to an offline
// server does, and lists again.
func (r *Runner) toolWhenBack(ctx context.Context, c *conn, tool string) (*toolEntry, error) {
	if r.cfg.CallRetries < 0 {
		return nil, ErrOffline
	}
	op := func() (*toolEntry, error) {
		e, err := c.tool(ctx, tool)
		if err != nil && (!errors.Is(err, ErrOffline) || ctx.Err() != nil) {
			return nil, backoff.Permanent(err)
		}
		return e, err
	}
	return withinRetryWindow(ctx, r, op)
}

// invoke sends one tools/call. sent reports whether it left the runner.
// An input-required result is answered and the call sent again until it
// completes (rounds.go); a resumed call starts from its stored round.
func (r *Runner) invoke(ctx context.Context, c *conn, entry *toolEntry, tool string, args map[string]any, token string) (*mcp.CallToolResult, bool, error) {
	round, err := c.resumeRound(ctx, entry)
	if err != nil {
		return nil, false, err
	}
	var stored *TaskRecord
	if round == nil {
		if stored, err = c.resumeTask(ctx); err != nil {
			return nil, false, err
		}
	}
	s, proc, done, err := c.acquire()
	if err != nil {
		return nil, false, err
	}
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	if token != "" {
		params.SetProgressToken(token)
	}
	tctx, span := telemetry.ToolCall(ctx, c.cfg.Name, tool)
	var res *mcp.CallToolResult
	switch {
	case stored != nil || (round == nil && c.asTask(tool)):
		res, err = c.runTask(tctx, s, params, stored) // tasks.go
	case round == nil:
		res, err = s.CallTool(tctx, params)
	}
	if err == nil {
		res, err = c.rounds(tctx, s, params, res, round)
	}
	telemetry.EndSpan(span, err)
	if errors.Is(err, ErrInterrupted) || errors.Is(err, ErrToolFailed) {
		done(nil)
		return nil, true, err
	}
	if err != nil {
		err = c.classify(ctx, err, done)
		if proc != nil && errors.Is(err, ErrConnection) {
			err = proc.exited(c.redactor, err)
		}
		return nil, true, err
	}
	done(nil)
	return res, true, nil
}

// fill turns the SDK result into the call's Result: redacted content, the
// isError message, validated structured content.
func (c *conn) fill(res *Result, cr *mcp.CallToolResult, out *jsonschema.Schema) {
	rd := c.redactor
	var texts []string
	// one is the redacted text of a lone text block: the joined text is
	// then that block's, and is not redacted a second time.
	var one struct {
		text      string
		redacted  bool
		available bool
	}
	res.Content = make([]any, 0, len(cr.Content))
	for _, blk := range cr.Content {
		if tc, ok := blk.(*mcp.TextContent); ok && tc.Meta == nil && tc.Annotations == nil {
			texts = append(texts, tc.Text)
			t, red := rd.String(tc.Text)
			one.text, one.redacted, one.available = t, red, len(texts) == 1
			res.Redacted = res.Redacted || red
			res.Content = append(res.Content, map[string]any{"type": "text", "text": t})
			continue
		}
		v, err := plainJSON(blk)
		if err != nil {
			res.Err = fmt.Errorf("%w: decode content: %v", ErrToolFailed, err)
			return
		}
		if m, ok := v.(map[string]any); ok && m["type"] == "text" {
			if s, ok := m["text"].(string); ok {
				texts = append(texts, s)
			}
		}
		v, red := redactBlock(rd, v)
		res.Redacted = res.Redacted || red
		res.Content = append(res.Content, v)
	}
	var text string
	var redacted bool
	if len(texts) == 1 && one.available {
		text, redacted = one.text, one.redacted
	} else {
		text, redacted = rd.String(strings.Join(texts, "\n"))
	}
	res.Text = text
	res.Redacted = res.Redacted || redacted
	if cr.StructuredContent != nil {
		// Validate before redaction: the schema describes what the server sent.
		if !cr.IsError {
			if err := validate(out, cr.StructuredContent); err != nil {
				res.Err = fmt.Errorf("%w: %v", ErrInvalidOutput, err)
			}
		}
		sc, err := plainJSON(cr.StructuredContent)
		if err == nil {
			sc, red := rd.Value(sc)
			res.Structured = sc
			res.Redacted = res.Redacted || red
		}
	} else if out != nil && !cr.IsError {
		res.Err = fmt.Errorf("%w: the tool declares an output schema but sent no structuredContent", ErrInvalidOutput)
	}
	if cr.IsError {
		msg := text
		if msg == "" {
			msg = "the tool reported an error without text"
		}
		res.Err = &ToolError{Message: msg}
	}
}

// redactBlock redacts a content block, leaving base64 payloads (image and
// audio data, resource blobs) intact: a token shape matched inside one would
// corrupt it, and a secret sent as a blob is not text anyone reads.
func redactBlock(rd *Redactor, v any) (any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return rd.Value(v)
	}
	var keep map[string]any
	hold := func(obj map[string]any, key string) {
		if b, ok := obj[key].(string); ok {
			if keep == nil {
				keep = map[string]any{}
			}
			keep[key] = b
			delete(obj, key)
		}
	}
	hold(m, "data")
	res, _ := m["resource"].(map[string]any)
	if res != nil {
		if b, ok := res["blob"].(string); ok {
			delete(res, "blob")
			defer func() { res["blob"] = b }()
		}
	}
	out, red := rd.Value(m)
	for k, b := range keep {
		m[k] = b
	}
	return out, red
}

func plainJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(b, &out)
}

// progressRouter hands progress notifications to the call that asked.
//
// The SDK reads a server's messages in order but runs notification handlers
// on their own goroutine, so a call's result can be seen before its last
// progress notification was handed over. A route is therefore kept until
// the last one arrived (progress reached total) or, briefly, until no more
// come (progressGrace).
type progressRouter struct {
	mu     sync.Mutex
	seq    uint64
	routes map[string]*progressRoute
}

type progressRoute struct {
	fn   func(ProgressEvent)
	last ProgressEvent
	seen bool
	more chan struct{} // signalled on every delivery
}

// progressGrace bounds the wait for a notification still being handed over.
const progressGrace = 100 * time.Millisecond

func (p *progressRouter) add(fn func(ProgressEvent)) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	t := "relay-" + strconv.FormatUint(p.seq, 10)
	if p.routes == nil {
		p.routes = map[string]*progressRoute{}
	}
	p.routes[t] = &progressRoute{fn: fn, more: make(chan struct{}, 1)}
	return t
}

// remove ends a call's route once its last notification was delivered.
func (p *progressRouter) remove(token string) {
	p.mu.Lock()
	rt := p.routes[token]
	p.mu.Unlock()
	if rt != nil {
		timer := time.NewTimer(progressGrace)
		defer timer.Stop()
		for !p.complete(rt) {
			select {
			case <-rt.more:
				continue
			case <-timer.C:
			}
			break
		}
	}
	p.mu.Lock()
	delete(p.routes, token)
	p.mu.Unlock()
}

// complete reports whether rt saw its final notification.
func (p *progressRouter) complete(rt *progressRoute) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return rt.seen && rt.last.Total > 0 && rt.last.Progress >= rt.last.Total
}

func (p *progressRouter) deliver(params *mcp.ProgressNotificationParams) {
	if params == nil {
		return
	}
	token := fmt.Sprint(params.ProgressToken)
	ev := ProgressEvent{Progress: params.Progress, Total: params.Total, Message: params.Message}
	p.mu.Lock()
	rt := p.routes[token]
	if rt != nil {
		rt.last, rt.seen = ev, true
	}
	p.mu.Unlock()
	if rt != nil {
		rt.fn(ev)
		select {
		case rt.more <- struct{}{}:
		default:
		}
	}
}

// Probe health statuses: Unhealthy when the handshake failed, Degraded when
// it succeeded but the ping or the tool listing did not.
const (
	ProbeHealthy   = "Healthy"
	ProbeDegraded  = "Degraded"
	ProbeUnhealthy = "Unhealthy"
	// ProbeNeedsLogin: the server asked for an OAuth login (StateNeedsLogin).
	ProbeNeedsLogin = "NeedsLogin"
)

// Probe is the health report of `relay mcp test`.
type Probe struct {
	Server string `json:"server"`
	// Status is Healthy, Degraded or Unhealthy; Timestamp when the check began.
	Status    string    `json:"status"`
	Timestamp time.Time `json:"timestamp"`
	// OK is Status == Healthy.
	OK              bool            `json:"ok"`
	Error           string          `json:"error,omitempty"`
	Handshake       time.Duration   `json:"handshake_ns"`
	Ping            time.Duration   `json:"ping_ns"`
	ProtocolVersion string          `json:"protocol_version,omitempty"`
	ServerName      string          `json:"server_name,omitempty"`
	ServerVersion   string          `json:"server_version,omitempty"`
	Capabilities    json.RawMessage `json:"capabilities,omitempty"`
	Tools           []string        `json:"tools,omitempty"`
}

// ProbeServer opens a fresh session to s, pings it, lists its tools and
// closes it. cfg supplies BaseEnv, HTTPClient, ConnectTimeout and the client
// name; its Servers are ignored.
func ProbeServer(ctx context.Context, cfg Config, s mcpconfig.Server) *Probe {
	cfg.Servers = nil
	cfg.AuditPath = ""
	cfg.State = nil
	r, err := New(cfg)
	p := &Probe{Server: s.Name, Status: ProbeUnhealthy, Timestamp: time.Now().UTC()}
	if err != nil {
		p.Error = err.Error()
		return p
	}
	defer r.Close()
	c := newConn(r, s)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ConnectTimeout)
	defer cancel()
	start := time.Now()
	session, _, err := dial(ctx, r, s, c.client(), c.log)
	if err != nil {
		p.Error = "handshake: " + err.Error()
		if errors.Is(err, ErrNeedsLogin) {
			p.Status, p.Error = ProbeNeedsLogin, err.Error()
		}
		return p
	}
	defer session.Close()
	p.Status = ProbeDegraded
	p.Handshake = time.Since(start)
	init := session.InitializeResult()
	p.ProtocolVersion = init.ProtocolVersion
	if init.ServerInfo != nil {
		p.ServerName, p.ServerVersion = init.ServerInfo.Name, init.ServerInfo.Version
	}
	p.Capabilities, _ = json.Marshal(init.Capabilities)
	start = time.Now()
	if err := ping(ctx, session); err != nil {
		p.Error = "ping: " + err.Error()
		return p
	}
	p.Ping = time.Since(start)
	if init.Capabilities != nil && init.Capabilities.Tools != nil {
		for t, err := range session.Tools(ctx, nil) {
			if err != nil {
				p.Error = "list tools: " + err.Error()
				return p
			}
			p.Tools = append(p.Tools, t.Name)
		}
	}
	sort.Strings(p.Tools)
	p.OK, p.Status = true, ProbeHealthy
	return p
}

var printer = message.NewPrinter(language.English)

// Safe reports whether repeating the tool "<server>.<tool>" cannot cause a
// second effect: it is annotated read-only or idempotent. Unknown tools and
// unreachable servers are not safe.
func (r *Runner) Safe(ctx context.Context, name string) bool {
	server, tool, ok := mcpconfig.SplitTool(name)
	c := r.conn(server)
	if !ok || c == nil {
		return false
	}
	e, err := c.tool(ctx, tool)
	return err == nil && e.safe()
}
