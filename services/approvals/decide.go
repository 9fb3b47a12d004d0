package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/internal/tick"
	slackmapper "github.com/relaystation/relay/mappers/slack"
)

// interaction is what the worker reads of meta.slack of an interaction
// envelope mapped by mappers/slack.
type interaction struct {
	Type      string `json:"type"`
	Team      string `json:"team"`
	User      string `json:"user"`
	Channel   string `json:"channel"`
	MessageTS string `json:"message_ts"`
	TriggerID string `json:"trigger_id"`
	Actions   []struct {
		ActionID string `json:"action_id"`
		BlockID  string `json:"block_id"`
		Value    any    `json:"value"`
	} `json:"actions"`
	View *struct {
		ID              string                    `json:"id"`
		CallbackID      string                    `json:"callback_id"`
		PrivateMetadata string                    `json:"private_metadata"`
		State           map[string]map[string]any `json:"state"`
	} `json:"view"`
}

// ErrNoInteraction marks an interaction envelope without meta.slack.
var ErrNoInteraction = errors.New("envelope has no meta.slack interaction")

func readInteraction(e *envelope.Envelope) (*interaction, error) {
	var ia interaction
	ok, err := e.Meta.Decode("slack", &ia)
	if err != nil {
		return nil, fmt.Errorf("interaction %s: %w", e.ID, err)
	}
	if !ok {
		return nil, fmt.Errorf("interaction %s: %w", e.ID, ErrNoInteraction)
	}
	return &ia, nil
}

// ourAction returns the first approval button of the interaction and the task
// id it carries, or "" when the click is not on an approval message.
func (ia *interaction) ourAction() (action, task string) {
	return ia.button(ActionApprove, ActionEdit, ActionReject)
}

// button returns the first action of the interaction whose id is one of ids,
// with the non-empty value it carries, or "" for none.
func (ia *interaction) button(ids ...string) (action, value string) {
	for _, a := range ia.Actions {
		if v, ok := a.Value.(string); ok && v != "" && slices.Contains(ids, a.ActionID) {
			return a.ActionID, v
		}
	}
	return "", ""
}

// HandleBlockActions handles a click on an approval message's button. Clicks
// on anything else are acknowledged without effect.
func (s *Service) HandleBlockActions(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	ia, err := readInteraction(e)
	if err != nil {
		return bus.Permanent(err)
	}
	action, task := ia.ourAction()
	if action == "" {
		if action, id := ia.questionAction(); action != "" {
			return s.handleQuestionAction(ctx, ia, action, id)
		}
		if _, id := ia.button(slackmapper.ActionCancelRun); id != "" {
			return s.cancelRun(ctx, ia, id)
		}
		return nil
	}
	log := s.log.With("envelope_id", e.ID, "task_id", task, "action", action, "user", ia.User)
	rec, ok, err := s.clickedRecord(ctx, task, ia.User, ia.Channel, log)
	if rec == nil || err != nil {
		return err
	}
	if !ok {
		s.refuse(ctx, e, rec, ia.User, ia.Channel, action, log)
		return nil
	}
	if ia.MessageTS != "" && rec.SlackTS != "" && ia.MessageTS != rec.SlackTS {
		s.ephemeral(ctx, ia.Channel, ia.User, "This message is outdated; please use the latest approval message in the thread.", log)
		return nil
	}
	switch action {
	case ActionApprove:
		return s.approve(ctx, e, task, ia.User, ia.Channel, log)
	case ActionEdit, ActionReject:
		if action == ActionEdit && rec.Step != nil {
			s.ephemeral(ctx, ia.Channel, ia.User, "A tool call cannot be edited here; approve or reject it.", log)
			return nil
		}
		if rec.Status != StatusPending {
			s.tellDecided(ctx, rec, ia.Channel, ia.User, log)
			return s.finish(ctx, rec)
		}
		if s.now().After(rec.ExpiresAt) {
			return s.expire(ctx, e, task, ia.Channel, ia.User, log)
		}
		md := viewMetadata{Thread: e.Meta.Thread, TaskID: task, Round: rec.Round, Channel: ia.Channel}
		view := editView(rec, md)
		if action == ActionReject {
			view = rejectView(rec, md)
		}
		if _, err := s.api.OpenViewContext(ctx, ia.TriggerID, view); err != nil {
			// A trigger id is valid for 3 seconds: a retry later cannot open it.
			log.Warn("could not open the approval form", "err", err)
			s.ephemeral(ctx, ia.Channel, ia.User, "Could not open the form ("+errText(err)+"); please click the button again.", log)
		}
		return nil
	}
	return nil
}

// clickedRecord loads the approval a click or a form is about and reports
// whether user may decide it. A nil record with a nil error means the
// approval is unknown or too old: user has been told and nothing is to be
// done.
func (s *Service) clickedRecord(ctx context.Context, task, user, channel string, log *slog.Logger) (*Record, bool, error) {
	rec, _, err := s.store.get(ctx, task)
	if errors.Is(err, ErrNotFound) {
		s.ephemeral(ctx, channel, user, "This approval is unknown or too old; nothing was done.", log)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	ok, err := s.approvers.allowed(ctx, user)
	if err != nil {
		return nil, false, err
	}
	return rec, ok, nil
}

// HandleViewSubmission handles the edit and reject modals' submissions.
func (s *Service) HandleViewSubmission(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	ia, err := readInteraction(e)
	if err != nil {
		return bus.Permanent(err)
	}
	if ia.View != nil && ia.View.CallbackID == ViewElicit {
		return s.handleQuestionForm(ctx, e, ia)
	}
	if ia.View == nil || (ia.View.CallbackID != ViewEdit && ia.View.CallbackID != ViewReject) {
		return nil
	}
	var md viewMetadata
	_ = json.Unmarshal([]byte(ia.View.PrivateMetadata), &md)
	if md.TaskID == "" {
		md.TaskID = e.Meta.TaskID
	}
	if md.TaskID == "" {
		return bus.Permanent(fmt.Errorf("view submission %s: no task id in private_metadata", e.ID))
	}
	task := md.TaskID
	log := s.log.With("envelope_id", e.ID, "task_id", task, "view", ia.View.CallbackID, "user", ia.User)
	rec, ok, err := s.clickedRecord(ctx, task, ia.User, md.Channel, log)
	if rec == nil || err != nil {
		return err
	}
	action := ActionEdit
	if ia.View.CallbackID == ViewReject {
		action = ActionReject
	}
	if !ok {
		s.refuse(ctx, e, rec, ia.User, md.Channel, action+"_submit", log)
		return nil
	}
	if ia.View.CallbackID == ViewEdit {
		return s.edit(ctx, e, md, ia, log)
	}
	return s.reject(ctx, e, md, ia, log)
}

// decision runs a pending-only transition (store.transition) with apply
// given the time it runs at. A nil apply only expires a record past its
// expiry.
func (s *Service) decision(ctx context.Context, task string, round int, apply func(r *Record, now time.Time)) (rec *Record, won, expired bool, err error) {
	now := s.now()
	var change func(r *Record) bool
	if apply != nil {
		change = func(r *Record) bool { apply(r, now); return true }
	}
	return s.store.transition(ctx, task, round, now, change)
}

// decide runs decision and then finishes the record it leaves (finish), so
// a redelivered click completes what an interrupted one began. expired is
// reported even when finishing fails.
func (s *Service) decide(ctx context.Context, task string, round int, apply func(r *Record, now time.Time)) (rec *Record, won, expired bool, err error) {
	rec, won, expired, err = s.decision(ctx, task, round, apply)
	if err != nil {
		return nil, false, false, err
	}
	return rec, won, expired, s.finish(ctx, rec)
}

// transition runs a pending-only change of task's record at now (round 0:
// whatever its round) and reports whether this call made it, plus whether
// the record turned out to be expired (then it was marked so). change
// changes r and reports whether it did; a nil change only expires a record
// past its expiry.
func (st *store) transition(ctx context.Context, task string, round int, now time.Time, change func(r *Record) bool) (rec *Record, won, expired bool, err error) {
	rec, err = st.mutate(ctx, task, func(r *Record) (*Record, error) {
		won, expired = false, false
		if r == nil {
			return nil, ErrNotFound
		}
		if r.Status != StatusPending || (round > 0 && r.Round != round) {
			return nil, errNoChange
		}
		if now.After(r.ExpiresAt) {
			r.Status, r.Shown = StatusExpired, false
			expired = true
			return r, nil
		}
		if change == nil || !change(r) {
			return nil, errNoChange
		}
		r.Shown = false
		won = true
		return r, nil
	})
	return rec, won, expired, err
}

func (s *Service) approve(ctx context.Context, e *envelope.Envelope, task, user, channel string, log *slog.Logger) error {
	rec, won, expired, err := s.decide(ctx, task, 0, func(r *Record, now time.Time) {
		r.Status, r.DecidedBy, r.DecidedAt = StatusApproved, user, now
	})
	if err != nil {
		return err
	}
	switch {
	case expired:
		s.audit(ctx, e, rec, user, "expired", "approval clicked after expiry; nothing posted", log)
		s.ephemeral(ctx, channel, user, "This suggestion expired "+slackDate(rec.ExpiresAt)+"; nothing was posted.", log)
	case won:
		log.Info("approved", "round", rec.Round, "target", rec.Target.String())
	case rec.DecidedBy != user || rec.Status != StatusApproved:
		s.tellDecided(ctx, rec, channel, user, log)
	}
	return nil
}

func (s *Service) edit(ctx context.Context, e *envelope.Envelope, md viewMetadata, ia *interaction, log *slog.Logger) error {
	text, found := editedText(ia.View.State)
	if !found || strings.TrimSpace(text) == "" {
		s.ephemeral(ctx, md.Channel, ia.User, "An empty answer was not saved; the suggestion is unchanged.", log)
		return nil
	}
	rec, won, expired, err := s.store.mutateEdit(ctx, s.now(), md, ia.User, text)
	if err != nil {
		return err
	}
	if err := s.show(ctx, rec); err != nil {
		return err
	}
	switch {
	case expired:
		if err := s.finish(ctx, rec); err != nil {
			return err
		}
		s.ephemeral(ctx, md.Channel, ia.User, "This suggestion expired; the edit was not saved and nothing was posted.", log)
	case won:
		s.audit(ctx, e, rec, ia.User, "edited", "", log)
	default:
		s.tellDecided(ctx, rec, md.Channel, ia.User, log)
	}
	return nil
}

// mutateEdit replaces a pending record's text (same round only).
func (st *store) mutateEdit(ctx context.Context, now time.Time, md viewMetadata, user, text string) (rec *Record, won, expired bool, err error) {
	return st.transition(ctx, md.TaskID, md.Round, now, func(r *Record) bool {
		if r.Text == text && r.EditedBy == user || r.Step != nil {
			return false // a redelivered submission, or a tool step (not editable)
		}
		r.Text, r.EditedBy = text, user
		return true
	})
}

func (s *Service) reject(ctx context.Context, e *envelope.Envelope, md viewMetadata, ia *interaction, log *slog.Logger) error {
	reason := reasonOf(ia.View.State)
	rec, won, expired, err := s.decide(ctx, md.TaskID, md.Round, func(r *Record, now time.Time) {
		r.Status, r.DecidedBy, r.DecidedAt, r.Reason = StatusRejected, ia.User, now, reason
	})
	if err != nil {
		return err
	}
	switch {
	case expired:
		s.ephemeral(ctx, md.Channel, ia.User, "This suggestion had already expired; nothing was posted.", log)
	case won:
		log.Info("rejected", "round", rec.Round, "reason", reason)
	case rec.DecidedBy != ia.User || rec.Status != StatusRejected:
		s.tellDecided(ctx, rec, md.Channel, ia.User, log)
	}
	return nil
}

// expire marks a pending record expired (a click after its expiry).
func (s *Service) expire(ctx context.Context, e *envelope.Envelope, task, channel, user string, log *slog.Logger) error {
	if _, _, _, err := s.decide(ctx, task, 0, nil); err != nil {
		return err
	}
	s.ephemeral(ctx, channel, user, "This suggestion expired; nothing was posted.", log)
	return nil
}

// finish completes a decided round idempotently: the approved answer is
// published (once: Nats-Msg-Id and idempotency key), the message shows the
// decision, and the decision is announced and audited.
func (s *Service) finish(ctx context.Context, rec *Record) error {
	if rec == nil || rec.Status == StatusPending {
		return nil
	}
	if (rec.Status == StatusApproved || rec.Step != nil) && !rec.Published {
		publish := s.publishApproved
		if rec.Step != nil {
			publish = s.publishStep // the approved call, or its refusal
		}
		if err := publish(ctx, rec); err != nil {
			return err
		}
		var err error
		rec, err = s.store.mutate(ctx, rec.TaskID, func(r *Record) (*Record, error) {
			if r == nil || r.Round != rec.Round || r.Published {
				return nil, errNoChange
			}
			r.Published = true
			return r, nil
		})
		if err != nil {
			return err
		}
	}
	if err := s.show(ctx, rec); err != nil {
		return err
	}
	if !rec.Announced {
		if err := s.announce(ctx, rec); err != nil {
			return err
		}
		_, err := s.store.mutate(ctx, rec.TaskID, func(r *Record) (*Record, error) {
			if r == nil || r.Round != rec.Round || r.Announced {
				return nil, errNoChange
			}
			r.Announced = true
			return r, nil
		})
		return err
	}
	return nil
}

func (s *Service) approvalMeta(rec *Record) map[string]any {
	m := map[string]any{
		"id":            rec.ApprovalID(),
		"status":        string(rec.Status),
		"round":         rec.Round,
		"slack_channel": rec.SlackChannel,
		"slack_ts":      rec.SlackTS,
	}
	if rec.DecidedBy != "" {
		m["decided_by"] = rec.DecidedBy
	}
	if !rec.DecidedAt.IsZero() {
		m["decided_at"] = rec.DecidedAt.UTC().Format(time.RFC3339Nano)
	}
	if rec.ThreadTS != "" {
		m["slack_thread_ts"] = rec.ThreadTS
	}
	if rec.EditedBy != "" {
		m["edited_by"] = rec.EditedBy
	}
	if rec.Reason != "" {
		m["reason"] = rec.Reason
	}
	return m
}

func (s *Service) publishApproved(ctx context.Context, rec *Record) error {
	var sugg envelope.Envelope
	if err := json.Unmarshal(rec.Suggestion, &sugg); err != nil {
		return bus.Permanent(fmt.Errorf("task %s: stored suggestion: %w", rec.TaskID, err))
	}
	if sugg.Meta.TaskID == "" {
		sugg.Meta.TaskID = rec.TaskID
	}
	target := rec.Target
	out := outEnvelope(&sugg, rec.Text, &target, rec.IdempotencyKey(), s.approvalMeta(rec))
	ctx, span := telemetry.Resume(ctx, "approved "+rec.ApprovalID(), rec.TraceParent)
	res, err := s.bus.Publish(ctx, SubjectOutPrefix+target.Channel, out, bus.WithMsgID(rec.MsgID()))
	telemetry.EndSpan(span, err)
	if err != nil {
		return err
	}
	s.log.Info("approved answer published", "task_id", rec.TaskID, "round", rec.Round, "out_id", out.ID,
		"subject", SubjectOutPrefix+target.Channel, "duplicate", res.Duplicate)
	return nil
}

// announce publishes the decision on approval.decided and its audit record.
func (s *Service) announce(ctx context.Context, rec *Record) error {
	who := rec.DecidedBy
	if who == "" {
		who = "nobody"
	}
	e := envelope.New(envelope.ChannelInternal, envelope.RoleSystem,
		fmt.Sprintf("approval %s: %s by %s for %s", rec.ApprovalID(), rec.Status, who, rec.Target.String()))
	e.Meta.TaskID = rec.task()
	e.Meta.Thread = threadOf(rec)
	e.Meta.Set(MetaApproval, s.approvalMeta(rec))
	t := rec.Target
	e.Meta.SetTarget(&t)
	if _, err := s.bus.Publish(ctx, SubjectDecided, e, bus.WithMsgID("decided:"+rec.ApprovalID())); err != nil {
		return err
	}
	// A decision's audit record is part of its announcement: when it cannot
	// be published, the record stays unannounced and the delivery is tried
	// again (both publishes carry message ids, so a retry adds neither twice).
	return s.publishAudit(ctx, "audit:decided:"+rec.ApprovalID(), auditRecord{
		Action: string(rec.Status), TaskID: rec.TaskID, Round: rec.Round, User: rec.DecidedBy, Status: string(rec.Status),
		Reason: rec.Reason, Target: rec.Target.String(), SlackChannel: rec.SlackChannel, SlackTS: rec.SlackTS,
		Allowed: true, At: s.now(),
	}, threadOf(rec))
}

// threadOf is the thread key of the suggestion that started the round.
func threadOf(rec *Record) string {
	var e struct {
		Meta struct {
			Thread string `json:"thread"`
		} `json:"meta"`
	}
	_ = json.Unmarshal(rec.Suggestion, &e)
	return e.Meta.Thread
}

// auditRecord is meta.audit of an audit.approvals envelope.
type auditRecord struct {
	Action       string    `json:"action"`
	TaskID       string    `json:"task_id"`
	Round        int       `json:"round,omitempty"`
	User         string    `json:"user,omitempty"`
	Allowed      bool      `json:"allowed"`
	Status       string    `json:"status,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Target       string    `json:"target,omitempty"`
	SlackChannel string    `json:"slack_channel,omitempty"`
	SlackTS      string    `json:"slack_ts,omitempty"`
	EnvelopeID   string    `json:"envelope_id,omitempty"`
	At           time.Time `json:"at"`
}

// audit records an action taken on behalf of user by an interaction.
func (s *Service) audit(ctx context.Context, e *envelope.Envelope, rec *Record, user, action, reason string, log *slog.Logger) {
	log.Info("approval audit", "audit_action", action, "reason", reason)
	_ = s.publishAudit(ctx, "audit:"+action+":"+e.ID, auditRecord{
		Action: action, TaskID: rec.TaskID, Round: rec.Round, User: user, Allowed: true, Status: string(rec.Status),
		Reason: reason, Target: rec.Target.String(), SlackChannel: rec.SlackChannel, SlackTS: rec.SlackTS,
		EnvelopeID: e.ID, At: s.now(),
	}, e.Meta.Thread)
}

// publishAudit publishes an audit record on audit.approvals. One that cannot
// be published is written to the log instead, and its error returned.
func (s *Service) publishAudit(ctx context.Context, msgID string, r auditRecord, thread string) error {
	e := envelope.New(envelope.ChannelInternal, envelope.RoleSystem,
		fmt.Sprintf("approvals audit: %s on task %s by %s (allowed: %t)", r.Action, r.TaskID, r.User, r.Allowed))
	e.Meta.TaskID, _, _ = strings.Cut(r.TaskID, ".step.") // a tool step's record names its task
	e.Meta.Thread = thread
	e.Meta.Encode(MetaAudit, r)
	_, err := s.bus.Publish(ctx, SubjectAudit, e, bus.WithMsgID(msgID))
	if err != nil {
		s.log.Warn("audit record not published; kept in this log", "task_id", r.TaskID, "audit_action", r.Action,
			"user", r.User, "allowed", r.Allowed, "err", err)
	}
	return err
}

// refuse answers a non-approver with an ephemeral refusal and audits it.
func (s *Service) refuse(ctx context.Context, e *envelope.Envelope, rec *Record, user, channel, action string, log *slog.Logger) {
	log.Warn("refused: not an approver", "slack_channel", channel)
	_ = s.publishAudit(ctx, "audit:refused:"+e.ID, auditRecord{
		Action: action, TaskID: rec.TaskID, Round: rec.Round, User: user, Allowed: false, Status: string(rec.Status),
		Reason: "not an approver", Target: rec.Target.String(), SlackChannel: rec.SlackChannel, SlackTS: rec.SlackTS,
		EnvelopeID: e.ID, At: s.now(),
	}, e.Meta.Thread)
	s.ephemeral(ctx, channel, user, "Sorry, only approvers may approve, edit or reject suggestions. This attempt was recorded.", log)
}

// tellDecided tells a clicker the round was already decided.
func (s *Service) tellDecided(ctx context.Context, rec *Record, channel, user string, log *slog.Logger) {
	var msg string
	switch rec.Status {
	case StatusApproved:
		msg = "Already approved by <@" + rec.DecidedBy + ">."
	case StatusRejected:
		msg = "Already rejected by <@" + rec.DecidedBy + ">."
	case StatusExpired:
		msg = "This approval expired; nothing was done."
	default:
		msg = "This approval changed meanwhile; please use the latest message."
	}
	s.ephemeral(ctx, channel, user, msg, log)
}

// ephemeral is best effort: a failure is logged, never retried (a retry would
// repeat the decision's other effects' checks for nothing).
func (s *Service) ephemeral(ctx context.Context, channel, user, text string, log *slog.Logger) {
	if channel == "" || user == "" || s.api == nil {
		log.Info("no channel to answer the user in", "text", text)
		return
	}
	if _, err := s.api.PostEphemeralContext(ctx, channel, user, slack.MsgOptionText(text, false)); err != nil {
		log.Warn("ephemeral message not sent", "slack_channel", channel, "err", err)
	}
}

func errText(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return "Slack did not answer"
}

// sweepLoop marks expired approvals and finishes decided ones whose effects
// were interrupted, every SweepInterval.
func (s *Service) sweepLoop(ctx context.Context) {
	tick.Every(ctx, s.cfg.SweepInterval, func() {
		if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("approval sweep failed", "err", err)
		} else if n > 0 {
			s.log.Info("approval sweep", "expired", n)
		}
	})
}

// Sweep marks every pending approval past its expiry as expired (updating its
// message) and finishes decided ones left unfinished for over a minute. It
// returns how many it expired.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	keys, err := s.store.keys(ctx)
	if err != nil {
		return 0, fmt.Errorf("list approvals: %w", err)
	}
	now := s.now()
	var n int
	var errs []error
	for _, k := range keys {
		rec, _, err := s.store.getKey(ctx, k)
		if err != nil {
			continue // deleted or aged out meanwhile
		}
		switch {
		case rec.Status == StatusPending && now.After(rec.ExpiresAt):
			_, _, expired, err := s.decide(ctx, rec.TaskID, rec.Round, nil)
			if expired {
				n++
				s.log.Info("approval expired", "task_id", rec.TaskID, "round", rec.Round)
			}
			errs = append(errs, err)
		case rec.Status != StatusPending && !rec.settled() && now.Sub(rec.DecidedAt) > time.Minute:
			errs = append(errs, s.finish(ctx, rec))
		}
	}
	return n, errors.Join(errs...)
}
