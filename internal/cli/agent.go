package cli

import (
	"context"
	"time"

	"github.com/slack-go/slack"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/services/agent"
)

func init() {
	registerService(&service{
		name:      "agent",
		summary:   "LLM agent: triggers on relay.in.*, calls tools over the bus, drafts suggestions (off without LLM_BASE_URL)",
		configure: configureAgent,
	})
}

// configureAgent reads the agent's settings (agent.ReadSettings) and builds
// the worker with the model, memory and tools of the bus.
func configureAgent(env *config.Env) buildFunc {
	s := agent.ReadSettings(env)
	return func(ctx context.Context, d *deps) (*runner, error) {
		cfg := s.Config
		cfg.Logger = d.Log
		cfg.Registerer = d.Registry
		if s.LLM.BaseURL != "" {
			m, err := agent.NewOpenAI(s.LLM)
			if err != nil {
				return nil, err
			}
			cfg.Model, cfg.ModelName = m, s.LLM.Model
			cfg.Memory = agent.BusMemory(d.Bus.Conn(), d.Bus.Prefix(), 10*time.Second)
			cfg.Tools = agent.BusTools(d.Bus.Conn(), d.Bus.Prefix(), 30*time.Second).SetWait(s.ToolsWait)
		}
		if cfg.Policy != nil && cfg.Tools == nil {
			cfg.Tools = agent.BusTools(d.Bus.Conn(), d.Bus.Prefix(), 30*time.Second).SetWait(s.ToolsWait)
		}
		if cfg.Policy != nil && s.SlackToken.IsSet() {
			opts := []slack.Option{slack.OptionHTTPClient(telemetry.HTTPClient(30 * time.Second))}
			if s.SlackURL != "" {
				opts = append(opts, slack.OptionAPIURL(s.SlackURL))
			}
			cfg.Slack = slack.New(s.SlackToken.Reveal(), opts...)
		}
		return runnerOf(agent.New(ctx, cfg, d.Bus))
	}
}
