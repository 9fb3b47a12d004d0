package toolrunner

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/tools"
)

// MetaApprovedBy is the meta key naming the Slack user who approved an
// agent's tool step: that person's connection is used on a per-user server.
const MetaApprovedBy = tools.MetaApprovedBy

// PrincipalOf is whose own connection a call uses on a per-user server
// ("oauth": {"per": "user"}), a Slack user id: the approver of an agent's
// tool step (meta "approved_by"); else the person the call acts for (the
// author of a code block, ActsFor); else, for a hook fired by a Slack
// event, the person who caused it. "" for an agent's call nobody approved:
// such a server refuses it.
func PrincipalOf(call *envelope.Envelope) string {
	if p := call.Meta.GetString(MetaApprovedBy); p != "" {
		return p
	}
	if p := ActsFor(call); p != "" {
		return p
	}
	if _, hook := call.Meta.Get("hook"); hook && call.Channel == envelope.ChannelSlack && call.Meta.Source != nil {
		return call.Meta.Source.Actor
	}
	return ""
}

// askConnect asks the approvals worker to send the person of a call refused
// for want of their own connection one ephemeral message with their link
// (best effort: the call's error names the command too).
func (s *Service) askConnect(ctx context.Context, call *envelope.Envelope, res *tools.Result) {
	var lerr *tools.NeedsLoginError
	// An agent's step approved in Slack is reported where it was approved
	// (for a task from GitHub, the approval thread).
	thread := cmp.Or(call.Meta.GetString(tools.MetaApprovedIn), call.Meta.Thread)
	if res.Err == nil || !errors.As(res.Err, &lerr) || !lerr.PerUser || lerr.Principal == "" || !strings.HasPrefix(thread, "slack:") {
		return
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := tools.AskConnect(actx, s.bus.Conn(), s.bus.Prefix(), tools.ConnectRequest{
		Server: lerr.Server, User: lerr.Principal, Thread: thread, Tool: call.ToolCall.Name,
		Approved: call.Meta.GetString(MetaApprovedBy) != ""})
	if err != nil {
		s.log.Warn("connection link not sent", "server", lerr.Server, "principal", lerr.Principal, "err", err)
	}
}
