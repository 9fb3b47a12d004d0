package agent

import (
	"os"
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Settings are the agent's settings from the environment: the service's
// Config (without Logger, Registerer, Model, Memory and Tools, which the
// process supplies) and the model's. The model is off without LLM_BASE_URL.
type Settings struct {
	Config Config
	LLM    OpenAIConfig
	// SlackToken and SlackURL (SLACK_BOT_TOKEN, SLACK_API_URL) give code-block
	// runs a Slack client: user-group membership, ephemeral refusals, file
	// uploads.
	SlackToken secret.Value
	SlackURL   string
	// ToolsWait bounds the wait for the tool runner's first discovery of
	// every enabled server before the first task lists tools
	// (RELAY_AGENT_TOOLS_WAIT).
	ToolsWait time.Duration
}

// ReadSettings reads LLM_BASE_URL, LLM_MODEL, LLM_API_KEY, the
// RELAY_AGENT_* settings and the task limits RELAY_LIMIT_TASKS_PER_REPO,
// RELAY_LIMIT_TASKS_PER_CHANNEL, RELAY_LIMIT_TASKS_PER_ACTOR (0: off) and
// RELAY_LIMIT_WINDOW. Problems are recorded in env; the caller stops on
// env.Err before anything connects.
func ReadSettings(env *config.Env) Settings {
	baseURL := env.URL("LLM_BASE_URL", "http", "https")
	model := env.String("LLM_MODEL", "")
	apiKey := env.Secret("LLM_API_KEY")
	if baseURL != "" && model == "" {
		env.Failf("LLM_MODEL", "required when LLM_BASE_URL is set (for example llama3.1 or qwen2.5:7b-instruct)")
	}
	triggerSpecs := env.List("RELAY_AGENT_TRIGGERS")
	triggers, err := ParseTriggers(triggerSpecs)
	if err != nil {
		env.Failf("RELAY_AGENT_TRIGGERS", "%v", err)
	}
	cfg := Config{
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
		Limits: Limits{
			PerRepository: env.Int("RELAY_LIMIT_TASKS_PER_REPO", DefaultLimitPerRepository, 0, 1_000_000),
			PerChannel:    env.Int("RELAY_LIMIT_TASKS_PER_CHANNEL", DefaultLimitPerChannel, 0, 1_000_000),
			PerActor:      env.Int("RELAY_LIMIT_TASKS_PER_ACTOR", DefaultLimitPerActor, 0, 1_000_000),
			Window:        env.Duration("RELAY_LIMIT_WINDOW", DefaultLimitWindow, time.Second, 24*time.Hour),
		},
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
	cfg.System = readSystemPrompt(env)
	llm := OpenAIConfig{
		BaseURL:  baseURL,
		Model:    model,
		APIKey:   apiKey,
		Timeout:  env.Duration("RELAY_AGENT_LLM_TIMEOUT", 120*time.Second, time.Second, time.Hour),
		MaxTries: env.Int("RELAY_AGENT_LLM_TRIES", 4, 1, 20),
	}
	cfg.Policy = mcpconfig.ReadPolicySetting(env)
	cfg.LongOutput = env.Int("RELAY_RUN_LONG_OUTPUT", DefaultLongOutput, 200, 40000)
	toolsWait := env.Duration("RELAY_AGENT_TOOLS_WAIT", DefaultToolsWait, 0, 10*time.Minute)
	return Settings{Config: cfg, LLM: llm, ToolsWait: toolsWait,
		SlackToken: env.Secret("SLACK_BOT_TOKEN"), SlackURL: env.URL("SLACK_API_URL", "http", "https")}
}

// readSystemPrompt reads RELAY_AGENT_SYSTEM_PROMPT or the file named by
// RELAY_AGENT_POLICY_FILE (not both).
func readSystemPrompt(env *config.Env) string {
	prompt := env.String("RELAY_AGENT_SYSTEM_PROMPT", "")
	file := env.String("RELAY_AGENT_POLICY_FILE", "")
	if file == "" {
		return prompt
	}
	if prompt != "" {
		env.Failf("RELAY_AGENT_POLICY_FILE", "set either RELAY_AGENT_SYSTEM_PROMPT or RELAY_AGENT_POLICY_FILE, not both")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		env.Failf("RELAY_AGENT_POLICY_FILE", "read policy: %v", err)
	}
	return strings.TrimSpace(string(b))
}
