package approvals

// Questions MCP servers ask during a tool call (elicitation), put to the
// person the call acts for in the call's Slack thread. The tool runner sends
// them over the bus (tools.SubjectElicit); this worker posts a message with
// Answer…, Decline and Cancel, opens a form built from the question's schema
// (elicit_form.go) and sends the answer back. State: one record per question
// in the key-value bucket "{prefix}_elicit", changed only by revision-checked
// updates, so a double click, two workers or the runner's expiry agree on one
// outcome.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/tools"
)

// The Block Kit identities of a question's message and form. Buttons carry
// the question id as their value.
const (
	ActionElicitAnswer  = "relay_elicit_answer"
	ActionElicitDecline = "relay_elicit_decline"
	ActionElicitCancel  = "relay_elicit_cancel"
	// ViewElicit is the form's callback id.
	ViewElicit = "relay_elicit_form"
)

// ElicitBucket returns the question bucket name for a bus prefix.
func ElicitBucket(prefix string) string { return prefix + "_elicit" }

// Question states besides the spec's actions (accept, decline, cancel).
const (
	elicitPending = "pending"
	elicitExpired = "expired"
)

// question is a question's record.
type question struct {
	Q tools.Question `json:"question"`
	// Reply is the runner's inbox for the answer.
	Reply   string         `json:"reply"`
	Status  string         `json:"status"`
	Content map[string]any `json:"content,omitempty"`
	By      string         `json:"by,omitempty"`
	// Reason says why the relay cancelled it (no By then).
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at,omitzero"`
	Channel   string    `json:"channel"`
	ThreadTS  string    `json:"thread_ts"`
	MessageTS string    `json:"message_ts,omitempty"`
}

func (q *question) answer() *tools.Answer {
	action := q.Status
	if action == elicitExpired {
		action = tools.ElicitDecline
	}
	return &tools.Answer{Action: action, Content: q.Content, By: q.By}
}

type questions struct{ kv jetstream.KeyValue }

func openQuestions(ctx context.Context, b *bus.Bus, ttl time.Duration) (*questions, error) {
	kv, err := b.OpenBucket(ctx, ElicitBucket(b.Prefix()), "relay approvals: questions MCP servers asked during tool calls (elicitation)", ttl)
	if err != nil {
		return nil, err
	}
	return &questions{kv: kv}, nil
}

func (qs *questions) get(ctx context.Context, id string) (*question, uint64, error) {
	e, err := qs.kv.Get(ctx, key(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read question %s: %w", id, err)
	}
	var q question
	if err := json.Unmarshal(e.Value(), &q); err != nil {
		return nil, 0, fmt.Errorf("question %s: %w", id, err)
	}
	return &q, e.Revision(), nil
}

// mutate applies fn to the current record until the revision-checked update
// wins; fn returning errNoChange leaves it as it is (and mutate returns it).
func (qs *questions) mutate(ctx context.Context, id string, fn func(q *question) error) (*question, error) {
	for range 10 {
		q, rev, err := qs.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := fn(q); errors.Is(err, errNoChange) {
			return q, nil
		} else if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(q)
		if _, err := qs.kv.Update(ctx, key(id), b, rev); err == nil {
			return q, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("update question %s: %w", id, err)
		}
	}
	return nil, fmt.Errorf("update question %s: too many concurrent changes", id)
}

// serveRPC answers tools.SubjectElicit and tools.SubjectElicitExpire (with
// Slack) and the console's approvalrpc subjects as the micro service
// tools.ElicitService (queue group "approvals") until stop is called.
func (s *Service) serveRPC(ctx context.Context) (stop func() error, err error) {
	prefix := s.bus.Prefix()
	replyError := func(e *rpc.Error) any { return tools.ElicitReply{Status: tools.ElicitNoHuman, Reason: e.Message} }
	eps := s.consoleEndpoints(prefix)
	if s.api != nil {
		eps = append(eps,
			rpc.Endpoint{Name: "elicit-ask", Subject: prefix + "." + tools.SubjectElicit, ErrorBody: replyError, Handle: s.ask},
			rpc.Endpoint{Name: "elicit-expire", Subject: prefix + "." + tools.SubjectElicitExpire, ErrorBody: replyError, Handle: s.expireQuestion},
			rpc.Endpoint{Name: "oauth-connect", Subject: prefix + "." + tools.SubjectConnect, ErrorBody: func(e *rpc.Error) any { return tools.ConnectReply{Error: e.Message} }, Handle: s.askConnect})
	}
	srv, err := rpc.Start(ctx, s.bus.Conn(), rpc.Config{
		Name:        tools.ElicitService,
		Description: "relay approvals: suggestions for the console; questions MCP servers ask during tool calls, put to a person in Slack",
		Prefix:      prefix,
		QueueGroup:  "approvals",
		Timeout:     30 * time.Second,
		Logger:      s.log,
	}, eps...)
	if err != nil {
		return nil, err
	}
	return srv.Stop, nil
}

// ask posts a question in its Slack thread.
func (s *Service) ask(ctx context.Context, data []byte) (any, error) {
	var in tools.ElicitRequest
	if err := json.Unmarshal(data, &in); err != nil || in.Question == nil || in.Question.ID == "" || in.Inbox == "" {
		e := rpc.Errorf(rpc.CodeBadRequest, "bad question: %v", err)
		return tools.ElicitReply{Status: tools.ElicitNoHuman, Reason: e.Message}, e
	}
	q := *in.Question
	log := s.log.With("question_id", q.ID, "server", q.Server, "tool", q.Tool, "thread", q.Thread, "task_id", q.TaskID)
	channel, threadTS, ok := slackThread(q.Thread)
	if !ok {
		return tools.ElicitReply{Status: tools.ElicitNoHuman, Reason: "the call belongs to no Slack thread"}, nil
	}
	rec := &question{Q: q, Reply: in.Inbox, Status: elicitPending, Channel: channel, ThreadTS: threadTS}
	b, _ := json.Marshal(rec)
	if _, err := s.questions.kv.Create(ctx, key(q.ID), b); errors.Is(err, jetstream.ErrKeyExists) && q.Resumable {
		return s.reattach(ctx, &q, in.Inbox, log)
	} else if err != nil {
		e := rpc.Errorf(rpc.CodeUnavailable, "question not recorded: %v", err)
		return tools.ElicitReply{Status: tools.ElicitNoHuman, Reason: e.Message}, e
	}
	blocks, fallback := questionMessage(rec)
	_, ts, err := s.api.PostMessageContext(ctx, channel, slack.MsgOptionBlocks(blocks...), slack.MsgOptionText(fallback, false), slack.MsgOptionTS(threadTS))
	if err != nil {
		_ = s.questions.kv.Delete(ctx, key(q.ID))
		log.Warn("question not posted to Slack; the server gets the defaults or a decline", "err", err)
		return tools.ElicitReply{Status: tools.ElicitNoHuman, Reason: "posting to Slack failed: " + errText(err)}, nil
	}
	if cur, err := s.questions.mutate(ctx, q.ID, func(r *question) error { r.MessageTS = ts; return nil }); err != nil {
		log.Warn("question message ts not recorded", "err", err)
	} else if cur.Status != elicitPending {
		// Closed (cancelled, expired) while it was being posted: the
		// closer had no message to update.
		s.showQuestion(ctx, cur, log)
	}
	log.Info("question asked in Slack", "acts_for", q.ActsFor, "deadline", q.Deadline)
	return tools.ElicitReply{Status: tools.ElicitAsked}, nil
}

// reattach answers a resumable question asked again (the tool runner that
// asked it stopped; another resumes the call): it is not posted twice. An
// open question's answer goes to the new inbox from now on; a closed one's
// is the reply.
func (s *Service) reattach(ctx context.Context, q *tools.Question, inbox string, log *slog.Logger) (any, error) {
	rec, err := s.questions.mutate(ctx, q.ID, func(r *question) error {
		if r.Q.CallID != q.CallID || r.Status != elicitPending {
			return errNoChange
		}
		r.Reply = inbox
		return nil
	})
	switch {
	case err != nil:
		e := rpc.Errorf(rpc.CodeUnavailable, "question not reattached: %v", err)
		return tools.ElicitReply{Status: tools.ElicitNoHuman, Reason: e.Message}, e
	case rec.Q.CallID != q.CallID:
		return tools.ElicitReply{Status: tools.ElicitNoHuman, Reason: "question id " + q.ID + " belongs to another call"}, nil
	case rec.Status != elicitPending:
		log.Info("resumed question was answered meanwhile", "status", rec.Status)
		return tools.ElicitReply{Status: tools.ElicitAnswered, Answer: rec.answer()}, nil
	}
	log.Info("resumed question reattached; its answer goes to the resuming tool runner")
	return tools.ElicitReply{Status: tools.ElicitAsked}, nil
}

// slackThread reads a slack:{team}/{channel}/{thread_ts} thread key.
func slackThread(thread string) (channel, ts string, ok bool) {
	if envelope.ThreadChannel(thread) != "slack" {
		return "", "", false
	}
	parts := strings.Split(strings.TrimPrefix(thread, "slack:"), "/")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// expireQuestion closes a question the runner stopped waiting for; the
// reply is the answer when one won the race.
func (s *Service) expireQuestion(ctx context.Context, data []byte) (any, error) {
	var in tools.ElicitExpire
	if err := json.Unmarshal(data, &in); err != nil || in.ID == "" {
		e := rpc.Errorf(rpc.CodeBadRequest, "bad expiry: %v", err)
		return tools.ElicitReply{Status: tools.ElicitExpired, Reason: e.Message}, e
	}
	won := false
	rec, err := s.questions.mutate(ctx, in.ID, func(q *question) error {
		if q.Status != elicitPending {
			return errNoChange
		}
		q.Status, q.At, won = elicitExpired, s.now(), true
		if in.Cancel {
			// The server was disabled (or the runner closed): the
			// question is cancelled, and its message says why.
			q.Status, q.Reason = tools.ElicitCancel, in.Reason
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return tools.ElicitReply{Status: tools.ElicitExpired, Reason: "unknown question"}, nil
	case err != nil:
		e := rpc.Errorf(rpc.CodeUnavailable, "%v", err)
		return tools.ElicitReply{Status: tools.ElicitExpired, Reason: e.Message}, e
	case !won && rec.Status != elicitExpired:
		return tools.ElicitReply{Status: tools.ElicitAnswered, Answer: rec.answer()}, nil
	}
	if won {
		s.showQuestion(ctx, rec, s.log.With("question_id", in.ID))
	}
	return tools.ElicitReply{Status: tools.ElicitExpired}, nil
}

// questionAction returns the question button of an interaction and the
// question id it carries.
func (ia *interaction) questionAction() (action, id string) {
	return ia.button(ActionElicitAnswer, ActionElicitDecline, ActionElicitCancel)
}

// mayAnswer reports whether user may answer q: the person the call acts
// for, or for an agent's task an approver.
func (s *Service) mayAnswer(ctx context.Context, q *question, user string) (bool, error) {
	if q.Q.ActsFor != "" {
		return user == q.Q.ActsFor, nil
	}
	return s.approvers.allowed(ctx, user)
}

// answerable loads the question a click or a form is about when user may
// answer it. A nil question with a nil error means user has been told why
// not (unknown, too old, or someone else's to answer).
func (s *Service) answerable(ctx context.Context, id, user, channel string, log *slog.Logger) (*question, error) {
	q, _, err := s.questions.get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		s.ephemeral(ctx, channel, user, "This question is unknown or too old; nothing was done.", log)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ok, err := s.mayAnswer(ctx, q, user)
	if err != nil {
		return nil, err
	}
	if !ok {
		s.ephemeral(ctx, channel, user, "Only "+answerer(q)+" may answer this question.", log)
		return nil, nil
	}
	return q, nil
}

// handleQuestionAction handles a click on a question's buttons.
func (s *Service) handleQuestionAction(ctx context.Context, ia *interaction, action, id string) error {
	log := s.log.With("question_id", id, "action", action, "user", ia.User)
	q, err := s.answerable(ctx, id, ia.User, ia.Channel, log)
	if q == nil || err != nil {
		return err
	}
	switch action {
	case ActionElicitDecline:
		return s.settle(ctx, id, tools.ElicitDecline, nil, ia.User, ia.Channel, log)
	case ActionElicitCancel:
		return s.settle(ctx, id, tools.ElicitCancel, nil, ia.User, ia.Channel, log)
	}
	if q.Status != elicitPending {
		s.ephemeral(ctx, ia.Channel, ia.User, "This question was already closed ("+q.Status+").", log)
		return nil
	}
	if len(tools.Fields(q.Q.Schema)) == 0 {
		return s.settle(ctx, id, tools.ElicitAccept, map[string]any{}, ia.User, ia.Channel, log)
	}
	if _, err := s.api.OpenViewContext(ctx, ia.TriggerID, questionForm(q)); err != nil {
		log.Warn("could not open the question form", "err", err)
		s.ephemeral(ctx, ia.Channel, ia.User, "Could not open the form ("+errText(err)+"); please click Answer again.", log)
	}
	return nil
}

// questionMetadata is the form's private_metadata.
type questionMetadata struct {
	Thread     string `json:"thread,omitempty"`
	TaskID     string `json:"task_id,omitempty"`
	QuestionID string `json:"question_id"`
	Channel    string `json:"channel"`
}

// handleQuestionForm handles the form's submission.
func (s *Service) handleQuestionForm(ctx context.Context, e *envelope.Envelope, ia *interaction) error {
	var md questionMetadata
	_ = json.Unmarshal([]byte(ia.View.PrivateMetadata), &md)
	if md.QuestionID == "" {
		return bus.Permanent(fmt.Errorf("view submission %s: no question id in private_metadata", e.ID))
	}
	log := s.log.With("question_id", md.QuestionID, "user", ia.User)
	q, err := s.answerable(ctx, md.QuestionID, ia.User, md.Channel, log)
	if q == nil || err != nil {
		return err
	}
	content, problems := formValues(q.Q.Schema, ia.View.State)
	if len(problems) > 0 {
		s.ephemeral(ctx, md.Channel, ia.User, "The answer was not sent: "+strings.Join(problems, "; ")+". Click Answer to try again.", log)
		return nil
	}
	return s.settle(ctx, md.QuestionID, tools.ElicitAccept, content, ia.User, md.Channel, log)
}

// settle records a person's answer, sends it to the runner and updates the
// message. An answer after the deadline closes the question as expired.
func (s *Service) settle(ctx context.Context, id, action string, content map[string]any, user, channel string, log *slog.Logger) error {
	won, late := false, false
	rec, err := s.questions.mutate(ctx, id, func(q *question) error {
		if q.Status != elicitPending {
			return errNoChange
		}
		now := s.now()
		if !q.Q.Deadline.IsZero() && now.After(q.Q.Deadline) {
			q.Status, q.At, late = elicitExpired, now, true
			return nil
		}
		q.Status, q.Content, q.By, q.At, won = action, content, user, now, true
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case late:
		s.ephemeral(ctx, channel, user, "Too late: the question was declined when its time ran out.", log)
	case !won:
		s.ephemeral(ctx, channel, user, "This question was already closed ("+rec.Status+").", log)
		return nil
	default:
		b, _ := json.Marshal(tools.ElicitReply{Status: tools.ElicitAnswered, Answer: rec.answer()})
		if err := s.bus.Conn().Publish(rec.Reply, b); err != nil {
			log.Warn("answer not sent to the tool runner; it declines at the deadline", "err", err)
		}
		log.Info("question answered", "action", action)
	}
	s.showQuestion(ctx, rec, log)
	return nil
}

// showQuestion updates the question's message to its state.
func (s *Service) showQuestion(ctx context.Context, q *question, log *slog.Logger) {
	if q.MessageTS == "" {
		return
	}
	blocks, fallback := questionMessage(q)
	if _, _, _, err := s.api.UpdateMessageContext(ctx, q.Channel, q.MessageTS, slack.MsgOptionBlocks(blocks...), slack.MsgOptionText(fallback, false)); err != nil {
		log.Warn("question message not updated", "err", err)
	}
}

func answerer(q *question) string {
	if q.Q.ActsFor != "" {
		return "<@" + q.Q.ActsFor + ">"
	}
	return "an approver"
}
