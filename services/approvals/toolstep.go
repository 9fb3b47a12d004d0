package approvals

// Tool steps: an agent's call of a per-user MCP server ("oauth": {"per":
// "user"}, docs/oauth.md) runs with the connection of the person who
// approves it. The agent publishes the call envelope on agent.toolstep
// instead of tool.call; this worker asks in the task's Slack thread with
// Approve and Reject, using the records, claims and transitions of
// suggestions (a record per step, keyed StepKey), and its approvers only.
// Approve publishes the call on tool.call with meta "approved_by" (the
// approver's Slack user id) and "approved_in" (the thread), once: the
// decision is a revision-checked transition and the publish carries
// Nats-Msg-Id "approve:{key}" (the tool runner also claims the call by its
// envelope id). Reject (with its reason) and expiry answer the call with a
// tool.failed naming who rejected it, so the model goes on.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools"
)

// SubjectToolStep carries the agent's calls that wait for a person's
// approval (the agent's SubjectToolStep).
const SubjectToolStep = "agent.toolstep"

// ErrBadToolStep marks a tool step envelope without its call or task.
var ErrBadToolStep = errors.New("tool step has no tool_call (id and name) or no meta.task_id")

// ToolStep is what a record of a tool step holds besides the call envelope
// (Record.Suggestion).
type ToolStep struct {
	// Task is the agent's task; CallID the call's tool_call.id in it.
	Task   string `json:"task"`
	CallID string `json:"call_id"`
	// Tool is "<server>.<tool>".
	Tool string `json:"tool"`
	// Args are the call's arguments as shown, secrets redacted.
	Args string `json:"args,omitempty"`
}

// Server is the MCP server of the step's tool.
func (t *ToolStep) Server() string { s, _, _ := strings.Cut(t.Tool, "."); return s }

// StepKey is the record key of call callID of task.
func StepKey(task, callID string) string { return task + ".step." + callID }

// anchorPrefix prefixes the keys that hold the approval thread of a task
// whose origin is no Slack thread (anchor), not records.
const anchorPrefix = "thread."

// anchor is the Slack thread a task without a Slack origin is discussed in:
// the message of its first tool step, or of its first suggestion.
type anchor struct {
	Channel  string `json:"slack_channel"`
	ThreadTS string `json:"thread_ts"`
}

// task is the agent's task a record is about (its key for suggestions).
func (r *Record) task() string {
	if r.Step != nil {
		return r.Step.Task
	}
	return r.TaskID
}

// HandleToolStep handles one agent.toolstep envelope: its approval message
// is posted once in the task's thread; a task nobody can be asked about in
// Slack gets its call answered with a tool.failed at once.
func (s *Service) HandleToolStep(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	if e.ToolCall == nil || e.ToolCall.ID == "" || e.ToolCall.Name == "" || e.Meta.TaskID == "" {
		return bus.Permanent(fmt.Errorf("tool step %s: %w", e.ID, ErrBadToolStep))
	}
	key := StepKey(e.Meta.TaskID, e.ToolCall.ID)
	log := s.log.With("envelope_id", e.ID, "task_id", e.Meta.TaskID, "call_id", e.ToolCall.ID, "tool", e.ToolCall.Name)
	channel, thread, target, why, err := s.stepPlace(ctx, e)
	if err != nil {
		return err
	}
	if why != "" {
		log.Info("tool step refused: nobody can be asked", "reason", why)
		return s.publishStepFailed(ctx, e, key, fmt.Sprintf("%s runs with the account of the person who approves the call in Slack, and %s; it was not run", e.ToolCall.Name, why))
	}
	args, _ := json.Marshal(e.ToolCall.Args)
	shown, _ := tools.NewRedactor().String(string(args))
	now := s.now()
	traceparent := m.Header.Get("traceparent")
	rec, err := s.store.mutate(ctx, key, func(r *Record) (*Record, error) {
		if r != nil {
			return nil, errNoChange // a redelivery: show what is recorded
		}
		return &Record{
			TaskID: key, Round: 1, Status: StatusPending, Text: "run " + e.ToolCall.Name, Suggestion: json.RawMessage(m.Data),
			SuggestionIDs: []string{e.ID}, Target: target, SlackChannel: channel, ThreadTS: thread,
			CreatedAt: now, ExpiresAt: now.Add(s.cfg.TTL), TraceParent: traceparent,
			Step: &ToolStep{Task: e.Meta.TaskID, CallID: e.ToolCall.ID, Tool: e.ToolCall.Name, Args: shown},
		}, nil
	})
	if err != nil {
		return err
	}
	if err := s.show(ctx, rec); err != nil {
		return err
	}
	if thread == "" && envelope.ThreadChannel(e.Meta.Thread) != envelope.ChannelSlack {
		s.keepAnchor(ctx, rec)
	}
	log.Info("tool step awaiting approval", "slack_channel", channel)
	return s.finish(ctx, rec) // a redelivery of a step decided meanwhile completes it
}

// stepPlace is where the tool step e is asked about: the channel and thread
// of its task's Slack origin; else, for a task with a target, the approval
// channel and the task's approval thread ("" until it has one). why says
// why nobody can be asked, when so.
func (s *Service) stepPlace(ctx context.Context, e *envelope.Envelope) (channel, thread string, target envelope.Target, why string, err error) {
	if s.api == nil {
		return "", "", target, "this relay has no Slack to ask in (the approvals worker runs for the console only)", nil
	}
	t, _ := e.Meta.Target()
	if ch, ts, ok := slackThread(e.Meta.Thread); ok {
		target = envelope.Target{Channel: string(envelope.ChannelSlack), SlackCh: ch, ThreadTS: ts}
		if t != nil {
			target = *t
		}
		return ch, ts, target, "", nil
	}
	if t == nil {
		return "", "", target, "this task has no Slack thread to ask in", nil
	}
	target = *t
	if t.Channel == string(envelope.ChannelSlack) && t.SlackCh != "" {
		return t.SlackCh, t.ThreadTS, target, "", nil
	}
	channel = s.cfg.channelFor(t.Channel)
	if channel == "" {
		return "", "", target, "no approval channel is configured for " + t.Channel, nil
	}
	a, err := s.anchorOf(ctx, e.Meta.TaskID)
	if err != nil {
		return "", "", target, "", err
	}
	if a != nil && a.Channel == channel {
		thread = a.ThreadTS
	}
	return channel, thread, target, "", nil
}

// anchorOf is the approval thread of task: its suggestion record's, else
// the one its first tool step opened; nil when it has none yet.
func (s *Service) anchorOf(ctx context.Context, task string) (*anchor, error) {
	if rec, _, err := s.store.get(ctx, task); err == nil && rec.ThreadTS != "" {
		return &anchor{Channel: rec.SlackChannel, ThreadTS: rec.ThreadTS}, nil
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	v, err := s.store.kv.Get(ctx, key(anchorPrefix+task))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the approval thread of task %s: %w", task, err)
	}
	var a anchor
	if err := json.Unmarshal(v.Value(), &a); err != nil || a.ThreadTS == "" {
		return nil, nil
	}
	return &a, nil
}

// keepAnchor records the thread of a task's first tool step message as the
// task's approval thread (the first one recorded stays), best effort.
func (s *Service) keepAnchor(ctx context.Context, rec *Record) {
	cur, _, err := s.store.get(ctx, rec.TaskID)
	if err != nil || cur.ThreadTS == "" {
		return
	}
	b, _ := json.Marshal(anchor{Channel: cur.SlackChannel, ThreadTS: cur.ThreadTS})
	if _, err := s.store.kv.Create(ctx, key(anchorPrefix+rec.task()), b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		s.log.Warn("approval thread of the task not recorded; its answer opens a thread of its own", "task_id", rec.task(), "err", err)
	}
}

// publishStep publishes the outcome of a decided tool step: the approved
// call on tool.call, acting for the approver, or a tool.failed saying who
// rejected it (or that it expired).
func (s *Service) publishStep(ctx context.Context, rec *Record) error {
	var call envelope.Envelope
	if err := json.Unmarshal(rec.Suggestion, &call); err != nil || call.ToolCall == nil {
		return bus.Permanent(fmt.Errorf("tool step %s: stored call: %v", rec.TaskID, err))
	}
	if rec.Status != StatusApproved {
		return s.publishStepFailed(ctx, &call, rec.TaskID, stepRefusal(rec))
	}
	delete(call.Meta.Extra, envelope.MetaTarget)
	call.Meta.Set(tools.MetaApprovedBy, rec.DecidedBy)
	ts := rec.ThreadTS
	if ts == "" {
		ts = rec.SlackTS
	}
	call.Meta.Set(tools.MetaApprovedIn, "slack:/"+rec.SlackChannel+"/"+ts)
	call.Meta.Set(MetaApproval, s.approvalMeta(rec))
	if _, err := s.bus.Publish(ctx, envelope.SubjectToolCall, &call, bus.WithMsgID(rec.MsgID())); err != nil {
		if errors.Is(err, bus.ErrInvalidEnvelope) {
			return bus.Permanent(fmt.Errorf("tool step %s: %w", rec.TaskID, err))
		}
		return err
	}
	s.log.Info("approved tool step published", "task_id", rec.task(), "call_id", rec.Step.CallID, "tool", rec.Step.Tool, "approved_by", rec.DecidedBy)
	return nil
}

// stepRefusal is the model's error for a rejected or expired tool step.
func stepRefusal(rec *Record) string {
	if rec.Status == StatusExpired {
		return fmt.Sprintf("nobody approved the call of %s before its approval expired; it was not run", rec.Step.Tool)
	}
	msg := fmt.Sprintf("the call of %s was rejected by %s in Slack", rec.Step.Tool, decider(rec.DecidedBy))
	if rec.Reason != "" {
		msg += " (reason: " + rec.Reason + ")"
	}
	return msg + "; it was not run"
}

// publishStepFailed answers call with a tool.failed carrying text as its
// error, once per step key.
func (s *Service) publishStepFailed(ctx context.Context, call *envelope.Envelope, key, text string) error {
	out := call.Reply(call.Channel, envelope.RoleTool, "tool "+call.ToolCall.Name+" failed: "+text)
	out.ToolCall = &envelope.ToolCall{ID: call.ToolCall.ID, Name: call.ToolCall.Name, Args: call.ToolCall.Args,
		Result: map[string]any{"status": string(tools.StatusError), "error": text, "redacted": false}}
	out.Meta.Set("in_reply_to", call.ID)
	if a, ok := call.Meta.Get("agent"); ok {
		out.Meta.Set("agent", a)
	}
	if _, err := s.bus.Publish(ctx, envelope.SubjectToolFailed, out, bus.WithMsgID("step-refused:"+key)); err != nil {
		if errors.Is(err, bus.ErrInvalidEnvelope) {
			return bus.Permanent(fmt.Errorf("tool step %s: %w", key, err))
		}
		return err
	}
	return nil
}

// stepMessage renders the approval message of a tool step.
func stepMessage(r *Record) ([]slack.Block, string) {
	st := r.Step
	head := fmt.Sprintf(":key: *The agent asks to run* `%s` on MCP server *%s*", slackmapper.Escape(st.Tool), slackmapper.Escape(st.Server()))
	blocks := []slack.Block{slack.NewSectionBlock(mrkdwn(head), nil, nil)}
	if st.Args != "" && st.Args != "null" {
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn("```"+slackmapper.Escape(clip.Within(st.Args, maxSectionText-20))+"```"), nil, nil))
	}
	blocks = append(blocks, slack.NewSectionBlock(mrkdwn("It runs with the *approver's own account* at *"+slackmapper.Escape(st.Server())+
		"*: approve only if it should act as you (connect first with `"+tools.ConnectCommand(st.Server())+"`)."), nil, nil))
	ctx := []slack.MixedElement{mrkdwn("task `" + slackmapper.Escape(st.Task) + "`")}
	if r.Status == StatusPending {
		ctx = append(ctx, mrkdwn("expires "+slackDate(r.ExpiresAt)))
	}
	blocks = append(blocks, slack.NewContextBlock("relay_approval_context", ctx...))
	var state, fallback string
	switch r.Status {
	case StatusPending:
		approve := slack.NewButtonBlockElement(ActionApprove, r.TaskID, plain("Approve"))
		approve.Style = slack.StylePrimary
		reject := slack.NewButtonBlockElement(ActionReject, r.TaskID, plain("Reject"))
		reject.Style = slack.StyleDanger
		blocks = append(blocks, slack.NewActionBlock(BlockActions, approve, reject))
		fallback = "Approval needed: the agent asks to run " + st.Tool + " with the approver's account"
	case StatusApproved:
		state = ":white_check_mark: *Approved* by " + decider(r.DecidedBy) + " " + slackDate(r.DecidedAt) + " — running with " + decider(r.DecidedBy) + "'s own account"
		fallback = "Approved: " + st.Tool
	case StatusRejected:
		state = ":x: *Rejected* by " + decider(r.DecidedBy) + " " + slackDate(r.DecidedAt) + " — not run"
		if r.Reason != "" {
			state += ": " + slackmapper.Escape(r.Reason)
		}
		fallback = "Rejected: " + st.Tool
	case StatusExpired:
		state = ":hourglass: *Expired* " + slackDate(r.ExpiresAt) + " without a decision; not run"
		fallback = "Expired: " + st.Tool
	}
	if state != "" {
		if len(state) > maxSectionText {
			state = slackmapper.SplitMrkdwn(state, maxSectionText)[0]
		}
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(state), nil, nil))
	}
	return blocks, fallback
}

// tellNotConnected says in the thread that an approved tool step was not
// run because its approver has not connected their account.
func (s *Service) tellNotConnected(ctx context.Context, channel, ts string, in tools.ConnectRequest, log *slog.Logger) {
	text := fmt.Sprintf(":key: <@%s> approved `%s`, but has not connected their own account to *%s*, so it was not run; the agent was told. "+
		"<@%s> got a link to connect (or runs `%s`); the agent can then be asked again.",
		in.User, slackmapper.Escape(in.Tool), slackmapper.Escape(in.Server), in.User, tools.ConnectCommand(in.Server))
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	if strings.Contains(ts, ".") {
		opts = append(opts, slack.MsgOptionTS(ts))
	}
	if _, _, err := s.api.PostMessageContext(ctx, channel, opts...); err != nil {
		log.Warn("thread not told of the missing connection", "err", err)
	}
}
