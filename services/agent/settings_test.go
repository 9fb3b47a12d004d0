package agent

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/relaystation/relay/config/configtest"
	"github.com/relaystation/relay/internal/testenv"
)

func TestReadSettings(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.md")
	testenv.WriteFile(t, policy, "  Be brief.\n")
	tools := filepath.Join(t.TempDir(), "tools.yaml")
	testenv.WriteFile(t, tools, "roles:\n  - role: oncall\n    capabilities: [everything.read]\n    members: {slack: [U0ONCALL]}\n")
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	testenv.WriteFile(t, empty, "roles:\n  - role: none\n    capabilities: []\n")
	configtest.Run(t, ReadSettings, []configtest.Case[Settings]{
		{Name: "defaults: model off", Env: map[string]string{}, Check: func(s Settings) bool {
			return s.LLM.BaseURL == "" && s.Config.MaxSteps == 8 && s.Config.Refs == 5 && s.Config.Role == "agent" &&
				s.LLM.Timeout == 120*time.Second && s.LLM.MaxTries == 4 && len(s.Config.Triggers) > 0
		}},
		{Name: "zero refs means none", Env: map[string]string{"RELAY_AGENT_REFS": "0"}, Check: func(s Settings) bool { return s.Config.Refs == -1 }},
		{Name: "policy file", Env: map[string]string{"RELAY_AGENT_POLICY_FILE": policy}, Check: func(s Settings) bool { return s.Config.System == "Be brief." }},
		{Name: "model", Env: map[string]string{"LLM_BASE_URL": "http://127.0.0.1:11434/v1", "LLM_MODEL": "llama3.1", "LLM_API_KEY": "k"},
			Check: func(s Settings) bool { return s.LLM.Model == "llama3.1" && s.LLM.APIKey.Reveal() == "k" }},
		{Name: "base URL without model", Env: map[string]string{"LLM_BASE_URL": "http://127.0.0.1:11434/v1"}, WantErr: []string{"LLM_MODEL"}},
		{Name: "prompt and policy file", Env: map[string]string{"RELAY_AGENT_SYSTEM_PROMPT": "x", "RELAY_AGENT_POLICY_FILE": policy},
			WantErr: []string{"RELAY_AGENT_POLICY_FILE"}},
		{Name: "unreadable policy file", Env: map[string]string{"RELAY_AGENT_POLICY_FILE": "/nonexistent/policy.md"},
			WantErr: []string{"RELAY_AGENT_POLICY_FILE", "read policy"}},
		{Name: "mention trigger without a mention", Env: map[string]string{"RELAY_AGENT_TRIGGERS": "slack.app_mention:mention"},
			WantErr: []string{"RELAY_AGENT_MENTION"}},
		{Name: "tool policy turns code-block runs on", Env: map[string]string{"RELAY_POLICY": tools, "RELAY_RUN_LONG_OUTPUT": "900", "SLACK_BOT_TOKEN": "xoxb-1"},
			Check: func(s Settings) bool {
				return s.Config.Policy.RoleOf("slack", "U0ONCALL", nil) == "oncall" && s.Config.LongOutput == 900 && s.SlackToken.IsSet()
			}},
		{Name: "no tool policy: runs off", Env: map[string]string{}, Check: func(s Settings) bool { return s.Config.Policy == nil && s.Config.LongOutput == DefaultLongOutput }},
		{Name: "empty capability list", Env: map[string]string{"RELAY_POLICY": empty}, WantErr: []string{"RELAY_POLICY", "capabilities"}},
		{Name: "long output too small", Env: map[string]string{"RELAY_RUN_LONG_OUTPUT": "10"}, WantErr: []string{"RELAY_RUN_LONG_OUTPUT"}},
		{Name: "several at once", Env: map[string]string{"RELAY_AGENT_MAX_STEPS": "0", "RELAY_AGENT_LLM_TRIES": "x"},
			WantErr: []string{"RELAY_AGENT_MAX_STEPS", "RELAY_AGENT_LLM_TRIES"}},
	})
}
