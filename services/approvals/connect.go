package approvals

// Per-person connections of remote MCP servers (docs/oauth.md): `/relay
// connect <server>` answers the person with an ephemeral link to the
// console's OAuth flow, signed for them and single use; a tool call refused
// because its person has not connected (the tool runner's
// tools.SubjectConnect request) gets them the same message once.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/slack-go/slack"

	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/tools"
)

// ConnectLinker makes a person's link to connect a per-user server
// (tools.ConnectLinks).
type ConnectLinker interface {
	Link(server, user string) (string, error)
}

// connectMessage is the ephemeral text with user's link to connect server;
// why, when set, says what asked for it.
func (s *Service) connectMessage(server, user, why string) (string, error) {
	if s.cfg.Connect == nil {
		return "", fmt.Errorf("connecting MCP servers from Slack is not set up here (the approvals worker needs RELAY_SECRET_KEY and the mcp.json of the tool runner)")
	}
	link, err := s.cfg.Connect.Link(server, user)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(":key: %sConnect your own account to MCP server *%s*: <%s|connect %s> (this link is yours alone, works once and expires in 10 minutes).", why, server, link, server), nil
}

// connectCommand answers `/relay connect <server>` with the person's link.
func (s *Service) connectCommand(ctx context.Context, channel, user, args string, log *slog.Logger) {
	server := strings.TrimSpace(args)
	if server == "" || strings.ContainsAny(server, " \t\n") {
		s.ephemeral(ctx, channel, user, "Usage: `/relay connect <server>` (a server of mcp.json whose entry has \"oauth\": {\"per\": \"user\"}).", log)
		return
	}
	text, err := s.connectMessage(server, user, "")
	if err != nil {
		log.Info("connection link refused", "server", server, "err", err)
		text = "Cannot connect " + server + ": " + err.Error()
	} else {
		log.Info("connection link sent", "server", server)
	}
	s.ephemeral(ctx, channel, user, text, log)
}

// askConnect answers tools.SubjectConnect: the person of a refused call
// gets one ephemeral message with their link in the call's thread.
func (s *Service) askConnect(ctx context.Context, data []byte) (any, error) {
	var in tools.ConnectRequest
	if err := json.Unmarshal(data, &in); err != nil || in.Server == "" || in.User == "" {
		e := rpc.Errorf(rpc.CodeBadRequest, "bad connect request: %v", err)
		return tools.ConnectReply{Error: e.Message}, e
	}
	log := s.log.With("server", in.Server, "user", in.User, "thread", in.Thread)
	channel, ts, ok := slackThread(in.Thread)
	if !ok {
		return tools.ConnectReply{Error: "the call belongs to no Slack thread"}, nil
	}
	why := ""
	if in.Tool != "" {
		why = "`" + in.Tool + "` was not run: "
	}
	text, err := s.connectMessage(in.Server, in.User, why)
	if err != nil {
		return tools.ConnectReply{Error: err.Error()}, nil
	}
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	if strings.Contains(ts, ".") {
		opts = append(opts, slack.MsgOptionTS(ts))
	}
	if in.Approved {
		s.tellNotConnected(ctx, channel, ts, in, log)
	}
	if _, err := s.api.PostEphemeralContext(ctx, channel, in.User, opts...); err != nil {
		log.Warn("connection link not sent", "err", err)
		return tools.ConnectReply{Error: "chat.postEphemeral: " + errText(err)}, nil
	}
	log.Info("connection link sent after a refused call")
	return tools.ConnectReply{Sent: true}, nil
}
