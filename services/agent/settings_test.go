package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/config"
)

func TestReadSettings(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.md")
	if err := os.WriteFile(policy, []byte("  Be brief.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr []string
		check   func(Settings) bool
	}{
		{name: "defaults: model off", env: map[string]string{}, check: func(s Settings) bool {
			return s.LLM.BaseURL == "" && s.Config.MaxSteps == 8 && s.Config.Refs == 5 && s.Config.Role == "agent" &&
				s.LLM.Timeout == 120*time.Second && s.LLM.MaxTries == 4 && len(s.Config.Triggers) > 0
		}},
		{name: "zero refs means none", env: map[string]string{"RELAY_AGENT_REFS": "0"}, check: func(s Settings) bool { return s.Config.Refs == -1 }},
		{name: "policy file", env: map[string]string{"RELAY_AGENT_POLICY_FILE": policy}, check: func(s Settings) bool { return s.Config.System == "Be brief." }},
		{name: "model", env: map[string]string{"LLM_BASE_URL": "http://127.0.0.1:11434/v1", "LLM_MODEL": "llama3.1", "LLM_API_KEY": "k"},
			check: func(s Settings) bool { return s.LLM.Model == "llama3.1" && s.LLM.APIKey.Reveal() == "k" }},
		{name: "base URL without model", env: map[string]string{"LLM_BASE_URL": "http://127.0.0.1:11434/v1"}, wantErr: []string{"LLM_MODEL"}},
		{name: "prompt and policy file", env: map[string]string{"RELAY_AGENT_SYSTEM_PROMPT": "x", "RELAY_AGENT_POLICY_FILE": policy},
			wantErr: []string{"RELAY_AGENT_POLICY_FILE"}},
		{name: "unreadable policy file", env: map[string]string{"RELAY_AGENT_POLICY_FILE": "/nonexistent/policy.md"},
			wantErr: []string{"RELAY_AGENT_POLICY_FILE", "read policy"}},
		{name: "mention trigger without a mention", env: map[string]string{"RELAY_AGENT_TRIGGERS": "slack.app_mention:mention"},
			wantErr: []string{"RELAY_AGENT_MENTION"}},
		{name: "several at once", env: map[string]string{"RELAY_AGENT_MAX_STEPS": "0", "RELAY_AGENT_LLM_TRIES": "x"},
			wantErr: []string{"RELAY_AGENT_MAX_STEPS", "RELAY_AGENT_LLM_TRIES"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := config.FromMap(tc.env)
			s := ReadSettings(env)
			err := env.Err()
			if len(tc.wantErr) > 0 {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("got error %v, want one naming %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("got %+v", s)
			}
		})
	}
}
