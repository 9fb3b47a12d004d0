// Package agent is the LLM agent worker (`relay agent`, also part of `relay
// serve`). It starts a task for every inbound envelope that matches a
// trigger, asks an OpenAI-compatible chat model for an answer, runs the
// model's tool calls across the bus, and publishes the drafted answer as a
// suggestion for a human to approve.
//
// # Flow
//
//	in.>  (durable "agent")          trigger -> task (id: TaskID(envelope id))
//	      model answers with tool calls ->  tool.call       (one envelope per MCP call)
//	tool.result (durable "agent-results"), tool.failed (durable "agent-failed")
//	      every call of the step answered -> the model again, ...
//	      model answers with text       ->  agent.suggestion
//	      step limit, token budget, LLM down -> agent.notice
//
// retrieve_docs is offered beside the MCP tools the agent's role may call and
// is answered by the agent itself from memory (package memory/remote).
//
// # Durability and idempotency
//
// A task's state (origin, messages, pending calls, step, tokens, status)
// lives in the JetStream key-value bucket {prefix}_tasks; every change is a
// revision-checked update, so a restarted or competing agent resumes a task
// where it stopped and never advances it twice. A model's answer is written
// to the task before anything is published; what is published carries a
// de-duplication id derived from the task (tool calls: task id, step and call
// id; the suggestion: "suggestion:"+task id; the notice: "notice:"+task id)
// and an envelope id derived the same way, so a redelivered trigger or tool
// result does not repeat work. Results are matched by tool_call.id.
//
// A state that says "done but not yet published" (a final task without
// final_published, a waiting step without calls_published) is completed by
// whichever handler touches the task next: a redelivered trigger or tool
// result, or a copy of one, publishes it before anything else. Asking the
// model takes a lease on the task that names the delivery its handler works
// for and is renewed every LeaseTTL/3 while the model thinks. Another
// delivery that finds a live lease leaves the task to its holder and is
// acknowledged; the holder's own redelivery (its handler died: JetStream
// redelivers after AckWait, 15s by default) takes the lease over at once; a
// lease not renewed for LeaseTTL (30s) is anyone's. A handler whose task was
// taken over by another handler of its own delivery (a redelivery while it
// still ran, after a change of the consumer's leader) is not acknowledged: it
// waits while that handler's lease lives, then advances the task again
// (loop.go, sameDelivery), so the other handler's failure cannot stop the task
// for good. A task create that reports the key exists on a first delivery
// (the write of an attempt cut short by a leader election) also advances the
// task rather than taking it for another copy's.
//
// # Self-recognition
//
// Messages the relay wrote (the outbound marker `<!-- relay:`, an actor that
// is the bot user), bot messages and edits never start a task.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fairshare"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Subjects the agent publishes, relative to the bus prefix.
const (
	// SubjectSuggestion carries the drafted answer (role assistant, meta.target).
	SubjectSuggestion = "agent.suggestion"
	// SubjectNotice carries task failures a human should see.
	SubjectNotice = "agent.notice"
)

// ToolRetrieveDocs is the function the agent answers itself from memory.
const ToolRetrieveDocs = "retrieve_docs"

// DefaultSystemPrompt is the policy when none is configured.
const DefaultSystemPrompt = "You are Relay, an assistant for a software team. You draft answers to issues, " +
	"alerts and questions; a human reviews every draft before it is posted. Be accurate and brief, " +
	"say what you do not know, and never invent facts, links or references."

// Config configures the agent.
type Config struct {
	// Model answers chat requests. Nil turns the agent off: Run logs so and
	// waits for ctx.
	Model Model
	// ModelName is the model asked for (LLM_MODEL), named in the task.step
	// records and the model-call spans.
	ModelName string
	// Tools lists the MCP tools of Role; nil offers only retrieve_docs.
	Tools ToolLister
	// Policy, when set, turns on code-block runs (coderun.go): members of
	// its roles run a tool by writing a fenced block naming it, and the
	// bindings limit the tools offered at each place. Nil: every message
	// goes to the model.
	Policy *mcpconfig.Policy
	// Slack answers Slack user-group membership of policy members and posts
	// ephemeral refusals; nil checks only user ids and refuses in the
	// thread.
	Slack SlackAPI
	// LongOutput is how many characters of a run's output are shown before
	// it is collapsed to a summary line. Default DefaultLongOutput.
	LongOutput int
	// Memory gives session context, long-term memories and retrieve_docs;
	// nil gives none.
	Memory Memory
	// Triggers start tasks. Default DefaultTriggers.
	Triggers []Trigger
	// Mention is how users address the bot in comments ("@relay-bot").
	Mention string
	// BotUsers are the relay's own accounts; their messages never start a
	// task. Default: Mention without its "@".
	BotUsers []string
	// System is the policy text (context.system). Default DefaultSystemPrompt.
	System string
	// Role is the policy role whose tools the model may call. Default "agent".
	Role string
	// AgentID names this agent instance in meta.agent. Default the host name.
	AgentID string
	// MaxSteps is how many model calls one task may make. Default 8.
	MaxSteps int
	// TokenBudget is how many tokens one task may use. Default 32000.
	TokenBudget int
	// ContextBudget bounds the session context asked from memory, in
	// tokens. Default 2000.
	ContextBudget int
	// Refs is how many long-term memories are retrieved for the prompt.
	// Default 5; negative retrieves none.
	Refs int
	// MaxToolOutput bounds a tool's output given to the model, in bytes.
	// Default 8000.
	MaxToolOutput int
	// Concurrency is how many messages each consumer handles at once. Default 4.
	Concurrency int
	// AckWait, MaxDeliver and NakDelays tune the consumers (see
	// bus.ConsumerConfig); defaults 15s, 5 and the bus's. Handlers heartbeat
	// every AckWait/3, so AckWait is how soon a dead agent's message, and with
	// it its task, is taken up by another agent.
	AckWait    time.Duration
	MaxDeliver int
	NakDelays  []time.Duration
	// TaskTTL is how long tasks are kept in the bucket. Default 7 days.
	TaskTTL time.Duration
	// LeaseTTL is how long a task's lease lasts unless renewed; the process
	// asking the model renews it every LeaseTTL/3, so a process that dies
	// loses it within LeaseTTL (sooner when its message is redelivered).
	// Default 30s.
	LeaseTTL time.Duration
	// Limits bound the tasks each source starts per window (fairshare.go).
	// The zero value is no limit; ReadSettings fills the defaults.
	Limits Limits
	// Registerer, when set, registers the agent's metrics.
	Registerer prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger

	// now replaces time.Now in the limits' windows (tests).
	now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Triggers == nil {
		c.Triggers, _ = ParseTriggers(nil)
	}
	if len(c.BotUsers) == 0 && c.Mention != "" {
		c.BotUsers = []string{c.Mention}
	}
	c.System = cmp.Or(c.System, DefaultSystemPrompt)
	c.Role = cmp.Or(c.Role, "agent")
	if c.AgentID == "" {
		c.AgentID, _ = os.Hostname()
		c.AgentID = cmp.Or(c.AgentID, "agent")
	}
	c.MaxSteps = cmp.Or(c.MaxSteps, 8)
	c.TokenBudget = cmp.Or(c.TokenBudget, 32000)
	c.ContextBudget = cmp.Or(c.ContextBudget, 2000)
	c.Refs = cmp.Or(c.Refs, 5)
	c.MaxToolOutput = cmp.Or(c.MaxToolOutput, 8000)
	c.Concurrency = config.Positive(c.Concurrency, 4)
	c.AckWait = cmp.Or(c.AckWait, 15*time.Second)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, 5)
	c.TaskTTL = cmp.Or(c.TaskTTL, 7*24*time.Hour)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, 30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a configuration the agent cannot run with.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxSteps < 1 {
		errs = append(errs, fmt.Errorf("agent: max steps %d must be at least 1", c.MaxSteps))
	}
	if c.TokenBudget < 100 {
		errs = append(errs, fmt.Errorf("agent: token budget %d must be at least 100", c.TokenBudget))
	}
	if c.MaxToolOutput < 100 {
		errs = append(errs, fmt.Errorf("agent: max tool output %d must be at least 100 bytes", c.MaxToolOutput))
	}
	if c.TaskTTL < time.Minute {
		errs = append(errs, fmt.Errorf("agent: task TTL %s must be at least 1m", c.TaskTTL))
	}
	if c.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("agent: lease TTL %s must be at least 1s", c.LeaseTTL))
	}
	if !c.Limits.off() && c.Limits.Window < time.Second {
		errs = append(errs, fmt.Errorf("agent: limit window %s must be at least 1s", c.Limits.Window))
	}
	return errors.Join(errs...)
}

// Service is the agent worker. Run it once.
type Service struct {
	cfg      Config
	instance string
	seq      atomic.Uint64
	log      *slog.Logger
	bus      *bus.Bus
	tasks    *Tasks
	// limiter counts tasks per source; nil without limits or a model.
	limiter *fairshare.Limiter
	// runs claims code-block runs (RunBucket); nil without a policy.
	runs    jetstream.KeyValue
	match   Matcher
	metrics *metrics
}

// New opens the task bucket (with a Model) and the run bucket (with a
// Policy) and returns the agent (not started). With neither it returns an
// agent whose Run only waits.
func New(ctx context.Context, cfg Config, b *bus.Bus) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errors.New("agent: a bus is required")
	}
	s := &Service{cfg: cfg, log: cfg.Logger, bus: b, metrics: newMetrics(cfg.Registerer),
		instance: cfg.AgentID + "-" + uuid.NewString()[:8],
		match:    Matcher{Triggers: cfg.Triggers, Mention: cfg.Mention, BotUsers: cfg.BotUsers}}
	if cfg.Policy != nil {
		runs, err := b.OpenBucket(ctx, RunBucket(b.Prefix()), "relay code-block runs: the envelope that runs each message's block", runClaimTTL)
		if err != nil {
			return nil, err
		}
		s.runs = runs
	}
	if cfg.Model == nil {
		return s, nil
	}
	t, err := OpenTasks(ctx, b, cfg.TaskTTL)
	if err != nil {
		return nil, err
	}
	s.tasks = t
	if !cfg.Limits.off() {
		if s.limiter, err = fairshare.Open(ctx, b, b.Prefix(), cfg.Limits.Window); err != nil {
			return nil, err
		}
		s.limiter.SetClock(cfg.now)
	}
	return s, nil
}

// Tasks is the task bucket (nil when the agent is off).
func (s *Service) Tasks() *Tasks { return s.tasks }

// Consumer names.
const (
	ConsumerInbound = "agent"
	ConsumerResults = "agent-results"
	ConsumerFailed  = "agent-failed"
	// ConsumerProgress reads the statuses of tool calls that run as MCP
	// tasks: a code-block run's running message shows them (runprogress.go).
	ConsumerProgress = "agent-progress"
)

// Run consumes triggers and tool results until ctx is cancelled, then drains
// in-flight work. Without a model it logs that the agent is off and waits.
func (s *Service) Run(ctx context.Context) error {
	if s.cfg.Model == nil && s.cfg.Policy == nil {
		s.log.Info("agent is off: no LLM configured (set LLM_BASE_URL and LLM_MODEL)")
		<-ctx.Done()
		return nil
	}
	if s.cfg.Model == nil {
		s.log.Info("no LLM configured (set LLM_BASE_URL and LLM_MODEL): only code-block runs are answered")
	}
	// A reloaded mcp.json and `relay mcp refresh` are announced on
	// rpc.tool.refresh; a cached tool list is dropped with the runners'
	// (listening, not answering).
	if r, ok := s.cfg.Tools.(interface{ Refresh() }); ok {
		sub, err := s.bus.Conn().Subscribe(s.bus.Subject(tools.SubjectRefresh), func(*nats.Msg) { r.Refresh() })
		if err != nil {
			return fmt.Errorf("subscribe to %s: %w", tools.SubjectRefresh, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	consumers := []struct {
		name, subject string
		h             bus.HandlerFunc
		deliverNew    bool
	}{
		// A new agent starts at new inbound messages: it must not answer a
		// week of history on its first start.
		{ConsumerInbound, envelope.SubjectInbound + ".>", s.handleInbound, true},
		{ConsumerResults, envelope.SubjectToolResult, s.handleResult, false},
		{ConsumerFailed, envelope.SubjectToolFailed, s.handleResult, false},
		{ConsumerProgress, envelope.SubjectToolProgress, s.handleRunProgress, true},
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range consumers {
		cc := bus.ConsumerConfig{Name: c.name, Subject: c.subject, Concurrency: s.cfg.Concurrency,
			AckWait: s.cfg.AckWait, MaxDeliver: s.cfg.MaxDeliver, NakDelays: s.cfg.NakDelays, DeliverNew: c.deliverNew}
		g.Go(func() error { return s.bus.Consume(gctx, cc, c.h) })
	}
	if s.limiter != nil {
		g.Go(func() error { return s.sweepDigests(gctx) })
	}
	for _, t := range s.cfg.Triggers {
		if t.Mention && s.cfg.Mention == "" {
			s.log.Warn("trigger needs a mention and none is configured; it never fires (set RELAY_AGENT_MENTION)", "trigger", t.String())
		}
	}
	s.log.Info("agent started", "agent_id", s.cfg.AgentID, "role", s.cfg.Role, "triggers", len(s.cfg.Triggers),
		"max_steps", s.cfg.MaxSteps, "token_budget", s.cfg.TokenBudget)
	return g.Wait()
}

type metrics struct {
	started, completed prometheus.Counter
	failed             *prometheus.CounterVec
	llm                *prometheus.HistogramVec
	steps              prometheus.Histogram
	deferred           *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		started: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "relay", Subsystem: "agent",
			Name: "tasks_started_total", Help: "Agent tasks started."}),
		completed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "relay", Subsystem: "agent",
			Name: "tasks_completed_total", Help: "Agent tasks that ended with a suggestion."}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "relay", Subsystem: "agent",
			Name: "tasks_failed_total", Help: "Agent tasks that ended with a notice, by kind."}, []string{"kind"}),
		llm: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "relay", Subsystem: "agent",
			Name: "llm_call_seconds", Help: "Chat completion calls (retries included), by outcome.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}}, []string{"outcome"}),
		steps: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "relay", Subsystem: "agent",
			Name: "task_steps", Help: "Model calls per finished task.", Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 10, 12, 16}}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "relay", Subsystem: "agent",
			Name: "triggers_deferred_total", Help: "Triggers over a per-source task limit, collected into a digest task, by the limit's kind (repository, channel, actor)."}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.started, m.completed, m.failed, m.llm, m.steps, m.deferred)
	}
	return m
}
