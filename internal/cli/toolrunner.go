package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

func init() {
	registerService(&service{
		name:      "toolrunner",
		summary:   "runs tool calls (tool.call) on the MCP servers of mcp.json under the policy",
		configure: configureToolRunner,
	})
}

// knownSecrets are redacted from tool results whenever they are set.
var knownSecrets = []string{
	"GITHUB_TOKEN", "GITHUB_WEBHOOK_SECRET", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET",
	"SENTRY_TOKEN", "SENTRY_CLIENT_SECRET", "OPENPROJECT_TOKEN", "OPENPROJECT_WEBHOOK_SECRET", "LLM_API_KEY",
}

// toolSettings are the tool runner's settings, shared by the service and `relay mcp`.
type toolSettings struct {
	ConfigPath string
	Servers    []mcpconfig.Server
	Policy     *mcpconfig.Policy
	PolicySet  bool
	Runner     tools.Config
}

// readToolSettings reads RELAY_MCP_CONFIG, RELAY_POLICY, RELAY_AUDIT_LOG,
// RELAY_MCP_HEALTH_INTERVAL and RELAY_REDACT_SECRETS, loading both files,
// and LLM_BASE_URL, LLM_MODEL, LLM_API_KEY for servers' sampling requests;
// problems are recorded in env.
func readToolSettings(env *config.Env) *toolSettings {
	dataDir := env.String("RELAY_DATA_DIR", "./data")
	path := env.String("RELAY_MCP_CONFIG", "")
	explicit := path != ""
	if !explicit {
		path = "./mcp.json"
	}
	ts := &toolSettings{ConfigPath: path}
	servers, err := mcpconfig.Load(path, mcpconfig.Options{Lookup: os.LookupEnv, DataDir: dataDir})
	switch {
	case err == nil:
		ts.Servers = servers
	case errors.Is(err, mcpconfig.ErrNotFound) && !explicit:
		// No default mcp.json: no servers.
	default:
		env.Failf("RELAY_MCP_CONFIG", "%v", err)
	}
	ts.Policy = mcpconfig.DefaultPolicy()
	if p := env.String("RELAY_POLICY", ""); p != "" {
		pol, err := mcpconfig.LoadPolicy(p)
		if err != nil {
			env.Failf("RELAY_POLICY", "%v", err)
		} else {
			ts.Policy, ts.PolicySet = pol, true
		}
	}
	var secrets []secret.Value
	for _, name := range append(knownSecrets, env.List("RELAY_REDACT_SECRETS")...) {
		if v := env.Secret(name); v.IsSet() {
			secrets = append(secrets, v)
		}
	}
	ts.Runner = tools.Config{
		Servers:        ts.Servers,
		Policy:         ts.Policy,
		AuditPath:      env.String("RELAY_AUDIT_LOG", filepath.Join(dataDir, "audit", "tools.jsonl")),
		HealthInterval: env.Duration("RELAY_MCP_HEALTH_INTERVAL", 30*time.Second, time.Second, time.Hour),
		Redactor:       tools.NewRedactor(secrets...),
		BaseEnv:        tools.BaseEnvFrom(os.Environ()),
		Sampler:        readSampler(env),
	}
	return ts
}

func configureToolRunner(env *config.Env) buildFunc {
	ts := readToolSettings(env)
	return func(ctx context.Context, d *deps) (*runner, error) {
		rc := ts.Runner
		rc.Logger = d.Log.With("service", "toolrunner")
		rc.Registerer = d.Registry
		if !ts.PolicySet {
			rc.Logger.Warn("RELAY_POLICY is not set: no role may call any tool until a policy grants capabilities")
		}
		rc.Logger.Info("mcp servers configured", "file", ts.ConfigPath, "servers", len(ts.Servers))
		svc, err := toolrunner.New(ctx, toolrunner.Config{Tools: rc, Logger: rc.Logger}, d.Bus)
		if err != nil {
			return nil, err
		}
		return &runner{run: svc.Run}, nil
	}
}
