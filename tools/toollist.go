package tools

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// ServerTools is what `relay mcp tools` prints: a server's tools as it sent
// them (schemas untouched: 2020-12 keywords, $ref and $defs as written,
// nothing dereferenced) and the protocol version of the session.
type ServerTools struct {
	Server          string      `json:"server"`
	ProtocolVersion string      `json:"protocol_version"`
	Tools           []*mcp.Tool `json:"tools"`
}

// ListServerTools opens a fresh session to s (negotiating its version as
// the runner does), lists every page of its tools and closes the session.
// cfg supplies BaseEnv, HTTPClient, ConnectTimeout and the client name.
func ListServerTools(ctx context.Context, cfg Config, s mcpconfig.Server) (*ServerTools, error) {
	cfg.Servers, cfg.AuditPath, cfg.State = nil, "", nil
	r, err := New(cfg)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	c := newConn(r, s)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ConnectTimeout)
	defer cancel()
	session, _, err := dial(ctx, r, s, c.client(), c.log)
	if err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	defer session.Close()
	out := &ServerTools{Server: s.Name, ProtocolVersion: session.InitializeResult().ProtocolVersion, Tools: []*mcp.Tool{}}
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		out.Tools = append(out.Tools, t)
	}
	return out, nil
}
