package cli

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/services/agent"
)

func init() {
	registerService(&service{
		name:      "agent",
		summary:   "LLM agent: triggers on relay.in.*, calls tools over the bus, drafts suggestions (off without LLM_BASE_URL)",
		configure: configureAgent,
	})
}

// configureAgent reads LLM_BASE_URL, LLM_MODEL, LLM_API_KEY and the
// RELAY_AGENT_* settings.
func configureAgent(env *config.Env) buildFunc {
	baseURL := env.URL("LLM_BASE_URL", "http", "https")
	model := env.String("LLM_MODEL", "")
	apiKey := env.Secret("LLM_API_KEY")
	if baseURL != "" && model == "" {
		env.Failf("LLM_MODEL", "required when LLM_BASE_URL is set (for example llama3.1 or qwen2.5:7b-instruct)")
	}
	triggerSpecs := env.List("RELAY_AGENT_TRIGGERS")
	triggers, err := agent.ParseTriggers(triggerSpecs)
	if err != nil {
		env.Failf("RELAY_AGENT_TRIGGERS", "%v", err)
	}
	cfg := agent.Config{
		Triggers:      triggers,
		Mention:       env.String("RELAY_AGENT_MENTION", ""),
		BotUsers:      env.List("RELAY_AGENT_BOT_USERS"),
		Role:          env.String("RELAY_AGENT_ROLE", "agent"),
		AgentID:       env.String("RELAY_AGENT_ID", ""),
		MaxSteps:      env.Int("RELAY_AGENT_MAX_STEPS", 8, 1, 100),
		TokenBudget:   env.Int("RELAY_AGENT_TOKEN_BUDGET", 32000, 100, 10_000_000),
		ContextBudget: env.Int("RELAY_AGENT_CONTEXT_BUDGET", 2000, 0, 1_000_000),
		Refs:          env.Int("RELAY_AGENT_REFS", 5, 0, 50),
		Concurrency:   env.Int("RELAY_AGENT_CONCURRENCY", 4, 1, 256),
		TaskTTL:       env.Duration("RELAY_AGENT_TASK_TTL", 7*24*time.Hour, time.Hour, 365*24*time.Hour),
	}
	if cfg.Refs == 0 {
		cfg.Refs = -1
	}
	for _, t := range triggers {
		// The defaults' mention triggers stay inactive without a mention;
		// configured ones need it.
		if t.Mention && cfg.Mention == "" && len(triggerSpecs) > 0 {
			env.Failf("RELAY_AGENT_MENTION", "required by trigger %s (for example @relay-bot)", t)
			break
		}
	}
	prompt := env.String("RELAY_AGENT_SYSTEM_PROMPT", "")
	if file := env.String("RELAY_AGENT_POLICY_FILE", ""); file != "" {
		if prompt != "" {
			env.Failf("RELAY_AGENT_POLICY_FILE", "set either RELAY_AGENT_SYSTEM_PROMPT or RELAY_AGENT_POLICY_FILE, not both")
		}
		b, err := os.ReadFile(file)
		if err != nil {
			env.Failf("RELAY_AGENT_POLICY_FILE", "read policy: %v", err)
		}
		prompt = strings.TrimSpace(string(b))
	}
	cfg.System = prompt
	toolsWait := env.Duration("RELAY_AGENT_TOOLS_WAIT", agent.DefaultToolsWait, 0, 10*time.Minute)
	llm := agent.OpenAIConfig{
		BaseURL:  baseURL,
		Model:    model,
		APIKey:   apiKey,
		Timeout:  env.Duration("RELAY_AGENT_LLM_TIMEOUT", 120*time.Second, time.Second, time.Hour),
		MaxTries: env.Int("RELAY_AGENT_LLM_TRIES", 4, 1, 20),
	}
	return func(ctx context.Context, d *deps) (*runner, error) {
		log := d.Log.With("service", "agent")
		cfg.Logger = log
		cfg.Registerer = d.Registry
		if baseURL != "" {
			m, err := agent.NewOpenAI(llm)
			if err != nil {
				return nil, err
			}
			cfg.Model = m
			cfg.Memory = agent.BusMemory(d.Bus.Conn(), d.Bus.Prefix(), 10*time.Second)
			cfg.Tools = agent.BusTools(d.Bus.Conn(), d.Bus.Prefix(), 30*time.Second).SetWait(toolsWait)
		}
		svc, err := agent.New(ctx, cfg, d.Bus)
		if err != nil {
			return nil, err
		}
		return &runner{run: svc.Run}, nil
	}
}
