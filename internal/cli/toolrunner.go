package cli

import (
	"context"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/services/toolrunner"
)

func init() {
	registerService(&service{
		name:      "toolrunner",
		summary:   "runs tool calls (tool.call) on the MCP servers of mcp.json under the policy",
		configure: configureToolRunner,
	})
}

// configureToolRunner reads the runner's settings (toolrunner.ReadSettings)
// and builds the service.
func configureToolRunner(env *config.Env) buildFunc {
	ts := toolrunner.ReadSettings(env)
	return func(ctx context.Context, d *deps) (*runner, error) {
		rc := ts.Runner
		rc.Logger = d.Log.With("service", "toolrunner")
		rc.Registerer = d.Registry
		if !ts.PolicySet {
			rc.Logger.Warn("RELAY_POLICY is not set: no role may call any tool until a policy grants capabilities")
		}
		rc.Logger.Info("mcp servers configured", "file", ts.ConfigPath, "servers", len(ts.Servers))
		svc, err := toolrunner.New(ctx, toolrunner.Config{Tools: rc, Logger: rc.Logger, NoticeChannel: ts.NoticeChannel}, d.Bus)
		if err != nil {
			return nil, err
		}
		return &runner{run: svc.Run, routes: func(s *httpserver.Server) { s.AddCheck("mcp_servers", svc.Ready) }}, nil
	}
}
