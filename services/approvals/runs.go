package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/rpc"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Code-block runs and the stop switch from Slack: the Cancel button of a
// running code-block run (posted by the agent) and `/relay stop` and
// `/relay resume`.

// SubjectCommands carries Slack slash commands; the worker answers `/relay
// stop` and `/relay resume` (consumer Consumer+"-commands").
const SubjectCommands = "in.slack.command"

// SubjectCancel is the tool runner's cancel endpoint, relative to the bus
// prefix: {"id": execution id, "actor": "slack:U…"} answered with
// {"cancelled": bool, "error": "..."}.
const SubjectCancel = "rpc.tool.cancel"

// StopSwitch flips the tool runner's persisted stop switch; the tool runner's
// state bucket (toolrunner.KVState) is one.
type StopSwitch interface {
	SetStop(ctx context.Context, stop bool) error
}

// ErrNoCancelEndpoint is wrapped when no tool runner answers SubjectCancel.
var ErrNoCancelEndpoint = errors.New("no tool runner answers cancel requests")

// cancelTarget names the tool runner in errors of a cancel request.
var cancelTarget = rpc.Target{Service: "tool runner", Start: "`relay toolrunner` or `relay serve`", Err: ErrNoCancelEndpoint}

// errNotActive says a non-approver clicked Cancel on a run the tool runners
// do not list as running (it has finished, or not started yet).
var errNotActive = errors.New("it is not running (it has finished or not started yet)")

// cancelRequest and cancelReply are the cancel endpoint's contract.
type cancelRequest struct {
	ID    string `json:"id"`
	Actor string `json:"actor"`
}

type cancelReply struct {
	Cancelled bool   `json:"cancelled"`
	Error     string `json:"error,omitempty"`
}

// cancelRun asks the tool runner to cancel the execution id on behalf of the
// clicking user and tells them the outcome (ephemeral). Only the run's
// author, an approver or a user whose policy role grants the running tool
// may cancel (mayCancel); anyone else is refused and the run goes on. The
// runner audits who cancelled.
func (s *Service) cancelRun(ctx context.Context, ia *interaction, id string) error {
	log := s.log.With("execution_id", id, "user", ia.User)
	ok, err := s.mayCancel(ctx, ia.User, id)
	switch {
	case errors.Is(err, errNotActive):
		s.ephemeral(ctx, ia.Channel, ia.User, "The run was not cancelled: "+err.Error(), log)
		return nil
	case err != nil:
		log.Warn("cancel not checked", "err", err)
		s.ephemeral(ctx, ia.Channel, ia.User, "The run could not be cancelled: "+err.Error(), log)
		return nil
	case !ok:
		log.Info("cancel refused: not the run's author, an approver or a role with the tool")
		s.ephemeral(ctx, ia.Channel, ia.User, "You may not cancel this run: only its author, an approver or a role that may use the tool can.", log)
		return nil
	}
	body, err := rpc.Call(ctx, s.bus.Conn(), s.bus.Prefix()+"."+SubjectCancel, cancelRequest{ID: id, Actor: "slack:" + ia.User}, 10*time.Second, cancelTarget)
	var reply cancelReply
	if err == nil {
		err = json.Unmarshal(body, &reply)
	}
	switch {
	case err != nil:
		log.Warn("cancel request failed", "err", err)
		s.ephemeral(ctx, ia.Channel, ia.User, "The run could not be cancelled: "+err.Error(), log)
	case reply.Cancelled:
		log.Info("run cancelled")
		s.ephemeral(ctx, ia.Channel, ia.User, "Cancelling the run; its message shows the outcome.", log)
	default:
		s.ephemeral(ctx, ia.Channel, ia.User, "The run was not cancelled: "+orDefault(reply.Error, "it has already finished"), log)
	}
	return nil
}

// mayCancel reports whether user may cancel the execution id: an approver
// (SLACK_APPROVERS, user groups included) always; else the run's author or
// a user whose policy role grants the run's tool, as the tool runner's
// active executions describe it. A run that is no longer active grants
// nobody but approvers (there is nothing to cancel).
func (s *Service) mayCancel(ctx context.Context, user, id string) (bool, error) {
	if ok, err := s.approvers.allowed(ctx, user); ok || err != nil {
		return ok, err
	}
	active, err := tools.ActiveRemote(ctx, s.bus.Conn(), s.bus.Prefix())
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(active, func(e tools.Execution) bool { return e.ID == id })
	if i < 0 {
		return false, errNotActive
	}
	run := active[i]
	if run.Actor == "slack:"+user {
		return true, nil
	}
	if s.cfg.Policy == nil {
		return false, nil
	}
	inGroup := func(group, user string) bool {
		m, err := s.approvers.members(ctx, group)
		return err == nil && m[user]
	}
	role := s.cfg.Policy.RoleOf(mcpconfig.ProviderSlack, user, inGroup)
	return role != "" && s.cfg.Policy.Allowed(role, run.Server, run.Tool), nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// HandleCommand answers `/relay stop` and `/relay resume` from an approver:
// it flips the tool runner's stop switch and says so in the channel; a
// non-approver gets an ephemeral refusal. `/relay connect <server>` answers
// anyone with their own connection link (connect.go). Other commands are
// the agent's.
func (s *Service) HandleCommand(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	var c struct {
		Channel string `json:"channel"`
		User    string `json:"user"`
		Text    string `json:"text"`
	}
	if ok, err := e.Meta.Decode(slackmapper.MetaKey, &c); !ok || err != nil {
		return nil
	}
	verb := strings.ToLower(strings.TrimSpace(c.Text))
	if first, rest, _ := strings.Cut(strings.TrimSpace(c.Text), " "); strings.EqualFold(first, "connect") {
		s.connectCommand(ctx, c.Channel, c.User, rest, s.log.With("envelope_id", e.ID, "user", c.User, "command", "connect"))
		return nil
	}
	if verb != "stop" && verb != "resume" {
		return nil
	}
	log := s.log.With("envelope_id", e.ID, "user", c.User, "command", verb)
	if s.cfg.Stop == nil {
		s.ephemeral(ctx, c.Channel, c.User, "The stop switch cannot be changed from Slack here (this approvals worker has no access to the tool runner's state).", log)
		return nil
	}
	ok, err := s.approvers.allowed(ctx, c.User)
	if err != nil {
		return err
	}
	if !ok {
		log.Info("stop switch change refused: not an approver")
		s.ephemeral(ctx, c.Channel, c.User, fmt.Sprintf("Only approvers may `/relay %s`.", verb), log)
		return nil
	}
	if err := s.cfg.Stop.SetStop(ctx, verb == "stop"); err != nil {
		return fmt.Errorf("/relay %s by %s: %w", verb, c.User, err)
	}
	log.Info("stop switch changed from Slack", "stop", verb == "stop")
	return s.announceStop(ctx, e, c.Channel, c.User, verb == "stop")
}

// announceStop says in the channel who flipped the stop switch (out.slack,
// once per command).
func (s *Service) announceStop(ctx context.Context, cmd *envelope.Envelope, channel, user string, stop bool) error {
	text := fmt.Sprintf(":octagonal_sign: <@%s> turned the stop switch ON: no new tool executions until `/relay resume`.", user)
	if !stop {
		text = fmt.Sprintf(":arrow_forward: <@%s> turned the stop switch OFF: tool executions resume.", user)
	}
	out := envelope.New(envelope.ChannelSlack, envelope.RoleSystem, text)
	out.Meta.Thread = cmd.Meta.Thread
	out.Meta.SetTarget(&envelope.Target{Channel: string(envelope.ChannelSlack), SlackCh: channel})
	key := "stop-switch:" + cmd.ID
	out.Meta.Set(MetaIdempotencyKey, key)
	if _, err := s.bus.Publish(ctx, SubjectOutPrefix+"slack", out, bus.WithMsgID(key)); err != nil {
		return fmt.Errorf("announce stop switch: %w", err)
	}
	return nil
}
