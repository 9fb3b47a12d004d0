package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Code-block runs (docs/slack.md, "Running tools from Slack and GitHub"). The agent
// detects them because it already consumes every inbound trigger: a message
// that is a run is not handed to the model. The run itself is a tool.call
// envelope the tool runner executes under the person's role (capabilities,
// budgets, limits, stop switch and audit apply); its result comes back on
// tool.result / tool.failed and is posted to the thread on out.{channel}
// with an idempotency key derived from the call.

// SubjectOutPrefix is followed by the target channel: out.slack, out.github.
const SubjectOutPrefix = "out."

// metaRun is the key, inside meta.agent of a run's tool.call (which the tool
// runner copies onto its answer), that marks a code-block run.
const metaRun = "code_run"

// SlackAPI is what code-block runs ask of Slack: user-group membership
// (usergroups.users.list), ephemeral refusals (chat.postEphemeral), the
// running message with its Cancel button (chat.postMessage) that the result
// replaces (chat.update), and file uploads. *slack.Client implements it.
type SlackAPI interface {
	GetUserGroupMembersContext(ctx context.Context, group string, options ...slack.GetUserGroupMembersOption) ([]string, error)
	PostEphemeralContext(ctx context.Context, channelID, userID string, options ...slack.MsgOption) (string, error)
	PostMessageContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
	UpdateMessageContext(ctx context.Context, channelID, timestamp string, options ...slack.MsgOption) (string, string, string, error)
	UploadFileContext(ctx context.Context, params slack.UploadFileParameters) (*slack.FileSummary, error)
}

// runOrigin is a message that asks for a run.
type runOrigin struct {
	e        *envelope.Envelope
	provider string // mcpconfig.ProviderSlack or ProviderGitHub
	actor    string // Slack user id or GitHub login
	text     string
	at       mcpconfig.Location
}

// runState travels in meta.agent.code_run of the call and its answer.
type runState struct {
	Run     ToolRun          `json:"run"`
	Origin  string           `json:"origin"` // runKey of the message
	Actor   string           `json:"actor"`  // "slack:U…" or "github:login"
	Target  *envelope.Target `json:"target"`
	Refused bool             `json:"refused,omitempty"`
	// MessageTS is the Slack message showing the run with its Cancel
	// button, which the result replaces; "" when none was posted.
	MessageTS string `json:"message_ts,omitempty"`
}

// runOriginOf returns the run request e makes, or false when e is not one:
// a Slack app mention, a message in a bound channel or a `/relay run`
// command, or a GitHub issue or pull-request comment created, by a person.
func (s *Service) runOriginOf(e *envelope.Envelope) (runOrigin, bool) {
	src := e.Meta.Source
	if s.cfg.Policy == nil || e.Role != envelope.RoleUser || src == nil || s.match.selfAuthored(e) != "" {
		return runOrigin{}, false
	}
	o := runOrigin{e: e, actor: src.Actor, text: e.Content, at: LocationOf(e)}
	switch e.Channel {
	case envelope.ChannelSlack:
		o.provider = mcpconfig.ProviderSlack
		switch src.Event {
		case "app_mention":
		case "message":
			if _, bound := s.cfg.Policy.ServersAt(o.at); !bound {
				return runOrigin{}, false
			}
		case "command":
			verb, rest := commandVerb(slackExtra(e, "text"))
			if verb != "run" {
				return runOrigin{}, false
			}
			o.text = rest
		default:
			return runOrigin{}, false
		}
	case envelope.ChannelGitHub:
		o.provider = mcpconfig.ProviderGitHub
		if src.Action != "created" || (src.Event != "issue_comment" && src.Event != "pull_request_review_comment") {
			return runOrigin{}, false
		}
	default:
		return runOrigin{}, false
	}
	return o, o.actor != ""
}

// runKey identifies the message a run comes from, the same for every
// envelope of it: Slack sends a mention in a bound channel as both
// app_mention and message, one run; a redelivered webhook is the same run.
func runKey(e *envelope.Envelope) string {
	if e.Channel == envelope.ChannelSlack {
		if ts := slackExtra(e, "ts"); ts != "" {
			return "slack:" + slackExtra(e, "channel") + ":" + ts
		}
		if id := slackExtra(e, "trigger_id"); id != "" {
			return "slack:command:" + id
		}
	}
	if src := e.Meta.Source; src != nil && src.DeliveryID != "" {
		return string(e.Channel) + ":" + src.DeliveryID
	}
	return e.ID
}

// switchCommand reports whether e is `/relay stop`, `/relay resume` or
// `/relay connect <server>`, which the approvals worker answers; the model
// never sees them.
func switchCommand(e *envelope.Envelope) bool {
	if e.Channel != envelope.ChannelSlack || e.Meta.Source == nil || e.Meta.Source.Event != "command" {
		return false
	}
	verb, rest := commandVerb(slackExtra(e, "text"))
	return (verb == "stop" || verb == "resume") && rest == "" || verb == "connect"
}

// commandVerb splits a slash command's text into its first word, in lower
// case, and the rest: `/relay Run` followed by a block on the next line is
// a run as `/relay run ` is.
func commandVerb(text string) (verb, rest string) {
	text = strings.TrimSpace(text)
	i := strings.IndexFunc(text, unicode.IsSpace)
	if i < 0 {
		return strings.ToLower(text), ""
	}
	return strings.ToLower(text[:i]), strings.TrimSpace(text[i:])
}

func slackExtra(e *envelope.Envelope, key string) string {
	m, _ := e.Meta.Extra[slackmapper.MetaKey].(map[string]any)
	v, _ := m[key].(string)
	return v
}

// handleRun starts the code-block run e asks for; false when e is not one
// (the model gets it).
func (s *Service) handleRun(ctx context.Context, m *bus.Message) (bool, error) {
	o, ok := s.runOriginOf(m.Envelope)
	if !ok {
		return false, nil
	}
	list, err := s.runTools(ctx, o)
	if err != nil {
		return true, err
	}
	blocks := FindCodeBlocks(o.text, serversOf(list.at))
	if len(blocks) == 0 {
		return false, nil
	}
	target, err := envelope.TargetOf(o.e)
	if err != nil {
		return true, bus.Permanent(fmt.Errorf("code run in %s: %w", o.e.ID, err))
	}
	key := runKey(o.e)
	st := runState{Origin: key, Actor: o.provider + ":" + o.actor, Target: target}
	log := s.log.With("envelope_id", o.e.ID, "thread", o.e.Meta.Thread, "actor", st.Actor)
	if list.role == "" {
		// The runner refuses it and audits permission_denied; the answer
		// becomes the refusal (one, however many blocks the message has).
		run, _ := ParseCodeBlock(blocks[0], "")
		st.Run, st.Refused = run, true
		log.Info("code run by a person without a role; refused", "tool", run.Name())
		return true, s.publishRun(ctx, o, st, "")
	}
	if len(blocks) > MaxRunsPerMessage {
		note := fmt.Sprintf(":warning: %d code blocks; only the first %d run.", len(blocks), MaxRunsPerMessage)
		if err := s.postRun(ctx, st, "run-limit:"+key, note); err != nil {
			return true, err
		}
		blocks = blocks[:MaxRunsPerMessage]
	}
	// Each block is a run of its own: its own execution id, running
	// message and answer. A redelivery publishes each again under the
	// same message ids, so none runs twice.
	for i, b := range blocks {
		st.Origin = blockOrigin(key, i)
		if err := s.startRun(ctx, o, st, b, list, log); err != nil {
			return true, err
		}
	}
	return true, nil
}

// MaxRunsPerMessage is how many code blocks of one message run; a message
// with more gets a note saying so and runs the first ones.
const MaxRunsPerMessage = 10

// blockOrigin is the origin of the message's i-th block (0-based): the
// first keeps the message's own key, as when a message ran one block.
func blockOrigin(key string, i int) string {
	if i == 0 {
		return key
	}
	return key + "#" + strconv.Itoa(i+1)
}

// startRun checks block b and runs it as st, or answers why it cannot run.
func (s *Service) startRun(ctx context.Context, o runOrigin, st runState, b CodeBlock, list runTools, log *slog.Logger) error {
	run, err := s.checkRun(b, list)
	st.Run = run
	if err != nil {
		log.Info("bad code block", "origin", st.Origin, "err", err)
		return s.postRun(ctx, st, "run-error:"+st.Origin, fmt.Sprintf(":warning: %v", err))
	}
	if mine, err := s.claimRun(ctx, st, o.e.ID); err != nil || !mine {
		if err == nil {
			log.Info("code run taken by another envelope of the same message", "tool", run.Name(), "origin", st.Origin)
		}
		return err
	}
	log.Info("code run", "tool", run.Name(), "role", list.role, "origin", st.Origin)
	st.MessageTS = s.postRunning(ctx, st, log)
	return s.publishRun(ctx, o, st, list.role)
}

// runTools is what a run may use: the person's role and the tools offered
// to it at the place.
type runTools struct {
	role string
	at   []tools.ToolInfo
}

func (s *Service) runTools(ctx context.Context, o runOrigin) (runTools, error) {
	var rt runTools
	if s.cfg.Tools == nil {
		return rt, nil
	}
	rt.role = s.cfg.Policy.RoleOf(o.provider, o.actor, s.inGroup(ctx))
	if rt.role == "" {
		return rt, nil
	}
	var err error
	if rt.at, err = s.cfg.Tools.Tools(ctx, rt.role, o.at); err != nil {
		return rt, fmt.Errorf("code run: list tools of %s: %w", rt.role, err)
	}
	return rt, nil
}

// inGroup answers Slack user-group membership through the Slack API; nil
// without one.
func (s *Service) inGroup(ctx context.Context) mcpconfig.InGroup {
	if s.cfg.Slack == nil {
		return nil
	}
	return func(group, user string) bool {
		ids, err := s.cfg.Slack.GetUserGroupMembersContext(ctx, group)
		if err != nil {
			s.log.Warn("Slack user group not read; its members hold no role here", "group", group, "err", slackmapper.Classify("usergroups.users.list", err))
			return false
		}
		return slices.Contains(ids, user)
	}
}

func serversOf(list []tools.ToolInfo) []string {
	var out []string
	for _, t := range list {
		if !slices.Contains(out, t.Server) {
			out = append(out, t.Server)
		}
	}
	return out
}

// defaultServer is the server of a block that names none: the place's
// first offered server (its binding's), else the first enabled server.
func defaultServer(list []tools.ToolInfo) string {
	if len(list) == 0 {
		return ""
	}
	return list[0].Server
}

// checkRun reads a block and checks it against what the role may run here:
// the server offered at the place, the tool offered to the role, the
// arguments valid against its inputSchema.
func (s *Service) checkRun(b CodeBlock, rt runTools) (ToolRun, error) {
	server := defaultServer(rt.at)
	run, err := ParseCodeBlock(b, server)
	if err != nil {
		return run, err
	}
	if run.Server == "" {
		return run, errors.New("the block names no server and none is offered here")
	}
	offered := serversOf(rt.at)
	if !slices.Contains(offered, run.Server) {
		return run, fmt.Errorf("server `%s` is not offered here to role %s (offered: %s)", run.Server, rt.role, listOrNone(offered))
	}
	for _, ti := range rt.at {
		if ti.Name == run.Name() {
			if err := tools.ValidateArgs(ti, run.Args); err != nil {
				return run, fmt.Errorf("`%s`: %v", run.Name(), err)
			}
			return run, nil
		}
	}
	return run, fmt.Errorf("`%s`: no such tool, or role %s may not run it", run.Name(), rt.role)
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// publishRun puts the run's tool.call on the bus: the person is the actor
// (meta.actor, meta.agent.id) with their role, the thread key its run id.
func (s *Service) publishRun(ctx context.Context, o runOrigin, st runState, role string) error {
	e := o.e.Reply(o.e.Channel, envelope.RoleAssistant, "run "+st.Run.Name()+" for "+st.Actor)
	e.ID = runCallID(st)
	e.Context = nil
	// The thread key is the run id (the tool runner's audit run id and
	// session-limit key default to the task id and the thread).
	e.Meta.TaskID = o.e.Meta.Thread
	e.Meta.Set("actor", st.Actor)
	e.Meta.Set("run_id", o.e.Meta.Thread)
	if o.provider == mcpconfig.ProviderSlack {
		e.Meta.Set("acts_for", o.actor) // the person answers the server's questions
	}
	state, err := toMap(st)
	if err != nil {
		return bus.Permanent(err)
	}
	e.Meta.Set("agent", map[string]any{"id": st.Actor, "role": role, metaRun: state})
	e.ToolCall = &envelope.ToolCall{ID: "run-" + e.ID, Name: st.Run.Name(), Args: st.Run.Args}
	if _, err := s.bus.Publish(ctx, envelope.SubjectToolCall, e, bus.WithMsgID("run:"+st.Origin)); err != nil {
		return fmt.Errorf("publish code run of %s: %w", o.e.ID, err)
	}
	return nil
}

// RunBucket is the key-value bucket where the agent claims code-block runs:
// key the execution id, value the id of the envelope that runs it.
func RunBucket(prefix string) string { return prefix + "_runs" }

// runClaimTTL is how long a claim is kept: far longer than Slack takes to
// send a message's second event, or JetStream to redeliver the first.
const runClaimTTL = 24 * time.Hour

// claimRun records that the envelope envelopeID runs st's message and
// reports whether it does. Slack sends a mention in a bound channel as two
// envelopes (app_mention and message); only the one that claims the run
// posts the running message and publishes the call, so the message shows
// one running message, not a second that keeps "Running…" and its Cancel
// button for good. A redelivery of the claiming envelope finds its own
// claim and goes on.
func (s *Service) claimRun(ctx context.Context, st runState, envelopeID string) (bool, error) {
	if s.runs == nil {
		return true, nil
	}
	key := runCallID(st)
	_, err := s.runs.Create(ctx, key, []byte(envelopeID))
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return false, fmt.Errorf("claim code run %s: %w", st.Origin, err)
	}
	claim, err := s.runs.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("read the claim of code run %s: %w", st.Origin, err)
	}
	return string(claim.Value()) == envelopeID, nil
}

// runCallID is the id of a run's tool-call envelope: its execution id.
func runCallID(st runState) string { return envelope.DerivedID("relay-run:" + st.Origin) }

// postRunning posts the Slack message that shows a run while it runs, with
// a Cancel button carrying the execution id; it returns its ts, or "" when
// there is no Slack client or the post failed (the result is then posted as
// a new message).
func (s *Service) postRunning(ctx context.Context, st runState, log *slog.Logger) string {
	t := st.Target
	if s.cfg.Slack == nil || t.Channel != string(envelope.ChannelSlack) {
		return ""
	}
	text, blocks := runningMessage(st, "")
	_, ts, err := s.cfg.Slack.PostMessageContext(ctx, t.SlackCh, slack.MsgOptionText(text, false), blocks, slack.MsgOptionTS(t.ThreadTS))
	if err != nil {
		log.Warn("running message not posted; the result will be a new message", "err", slackmapper.Classify("chat.postMessage", err))
		return ""
	}
	return ts
}

// runningMessage is the text and blocks of a run's running message, with
// its Cancel button; status, when set, is the latest status of the run's
// MCP task (runprogress.go).
func runningMessage(st runState, status string) (string, slack.MsgOption) {
	who := st.Actor[strings.IndexByte(st.Actor, ':')+1:]
	text := fmt.Sprintf(":hourglass_flowing_sand: Running `%s` for <@%s>…", st.Run.Name(), who)
	if status != "" {
		text += "\n> " + clip.Line(status, 300)
	}
	button := slack.NewButtonBlockElement(slackmapper.ActionCancelRun, runCallID(st), slack.NewTextBlockObject(slack.PlainTextType, "Cancel", false, false))
	button.Style = slack.StyleDanger
	return text, slack.MsgOptionBlocks(
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil),
		slack.NewActionBlock("relay_run", button))
}

func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// postRun posts text to the run's thread through the outbound worker, once
// per key.
func (s *Service) postRun(ctx context.Context, st runState, key, text string) error {
	ch := envelope.Channel(st.Target.Channel)
	e := envelope.New(ch, envelope.RoleAssistant, text)
	e.ID = envelope.DerivedID("relay-run-post:" + key)
	e.Meta.SetTarget(st.Target)
	e.Meta.Set("idempotency_key", key)
	e.Meta.Set("actor", st.Actor)
	if _, err := s.bus.Publish(ctx, SubjectOutPrefix+st.Target.Channel, e, bus.WithMsgID(key)); err != nil {
		return fmt.Errorf("post code run answer %s: %w", key, err)
	}
	return nil
}
