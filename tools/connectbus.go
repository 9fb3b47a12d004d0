package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// SubjectConnect (with the bus prefix) asks the approvals worker to send a
// person who has not connected a per-user server one ephemeral Slack
// message with their `/relay connect` link (ConnectRequest, request/reply
// to ElicitService).
const SubjectConnect = "rpc.oauth.connect"

// ConnectRequest is the body of a SubjectConnect request.
type ConnectRequest struct {
	Server string `json:"server"`
	// User is the Slack user id who is to connect.
	User string `json:"user"`
	// Thread is the call's thread key (slack:{team}/{channel}/{ts}): the
	// message goes to that channel and thread.
	Thread string `json:"thread"`
	// Tool is the tool the call wanted ("<server>.<tool>").
	Tool string `json:"tool,omitempty"`
	// Approved says the call was an agent's tool step that User approved
	// in Thread: the thread is told too that it was not run, not only the
	// person.
	Approved bool `json:"approved,omitempty"`
}

// Meta keys of an agent's tool call approved in Slack (a per-user
// server's, docs/oauth.md): the approvals worker sets them when it
// publishes the approved call.
const (
	// MetaApprovedBy is the Slack user id of the approver, whose own
	// connection the call uses.
	MetaApprovedBy = "approved_by"
	// MetaApprovedIn is the Slack thread key (slack:{team}/{channel}/{ts})
	// of the approval message: where a missing connection is reported.
	MetaApprovedIn = "approved_in"
)

// ConnectReply answers a ConnectRequest.
type ConnectReply struct {
	Sent  bool   `json:"sent"`
	Error string `json:"error,omitempty"`
}

// AskConnect sends req to the approvals worker. It is best effort: the
// caller's error already names the command.
func AskConnect(ctx context.Context, nc *nats.Conn, prefix string, req ConnectRequest) error {
	body, err := rpc.Call(ctx, nc, prefix+"."+SubjectConnect, req, 0, approvalsTarget)
	if err != nil {
		return err
	}
	var r ConnectReply
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("decode reply of %s: %w", SubjectConnect, err)
	}
	if !r.Sent {
		return errors.New(cmpOr(r.Error, "not sent"))
	}
	return nil
}

// ConnectLinks makes the links `/relay connect` answers with: the console's
// /oauth/connect with a signed, single-use token for one server and person.
type ConnectLinks struct {
	Signer *LinkSigner
	// ConsoleURL is the console as browsers reach it (RELAY_CONSOLE_URL).
	ConsoleURL string
	// Servers are the mcp.json entries.
	Servers []mcpconfig.Server
}

// Link is principal's link to connect server, which must be a per-user
// server of the configuration.
func (l *ConnectLinks) Link(server, principal string) (string, error) {
	var found *mcpconfig.Server
	for i := range l.Servers {
		if l.Servers[i].Name == server {
			found = &l.Servers[i]
		}
	}
	switch {
	case found == nil:
		return "", fmt.Errorf("there is no MCP server %q in mcp.json", server)
	case !PerUser(*found):
		return "", fmt.Errorf("server %s is connected once for the whole team, not per person: an operator connects it (`relay mcp login %s` or Connect on the console's tools page)", server, server)
	case l.Signer == nil:
		return "", errors.New("connection links need RELAY_SECRET_KEY in the approvals worker's environment")
	}
	return strings.TrimSuffix(l.ConsoleURL, "/") + "/oauth/connect?t=" + url.QueryEscape(l.Signer.Sign(server, principal)), nil
}
