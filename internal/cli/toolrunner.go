package cli

import (
	"context"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools/mcpconfig"
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
	ts := readToolSettings(env)
	return func(ctx context.Context, d *deps) (*runner, error) {
		rc := ts.Runner
		rc.Logger = d.Log
		rc.Registerer = d.Registry
		if !ts.PolicySet {
			rc.Logger.Warn("RELAY_POLICY is not set: no role may call any tool until a policy grants capabilities")
		}
		rc.Logger.Info("mcp servers configured", "file", ts.ConfigPath, "servers", len(ts.Servers))
		sealer, _ := ts.OAuth.Sealer() // nil without RELAY_SECRET_KEY (checked by ReadSettings when needed)
		svc, err := toolrunner.New(ctx, toolrunner.Config{Tools: rc, Logger: rc.Logger, NoticeChannel: ts.NoticeChannel, Sealer: sealer,
			WatchConfig: true, ConfigOptions: mcpconfig.Options{DataDir: ts.DataDir}}, d.Bus)
		if err != nil {
			return nil, err
		}
		return &runner{run: svc.Run, routes: func(s *httpserver.Server) { s.AddCheck("mcp_servers", svc.Ready) }}, nil
	}
}

// readToolSettings reads the runner's settings (toolrunner.ReadSettings) and
// gives it the sampler of the configured LLM endpoint (LLM_BASE_URL,
// LLM_MODEL, LLM_API_KEY) for servers' sampling requests: the tool runner
// does not import the agent, so the process wires the two.
func readToolSettings(env *config.Env) *toolrunner.Settings {
	ts := toolrunner.ReadSettings(env)
	ts.Runner.Sampler = readSampler(env)
	return ts
}
