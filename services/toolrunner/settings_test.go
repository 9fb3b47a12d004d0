package toolrunner

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/config/configtest"
	"github.com/relaystation/relay/internal/testenv"
)

func TestReadSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mcpJSON := filepath.Join(dir, "mcp.json")
	testenv.WriteFile(t, mcpJSON, `{"mcpServers": {"echo": {"command": "echo-server", "args": ["--stdio"]}}}`)
	// A binding naming a server mcp.json lacks stops startup.
	unbound := filepath.Join(dir, "policy.yaml")
	testenv.WriteFile(t, unbound, "bindings:\n  - slack: {channel: C0OPS}\n    servers: [echo, jira]\n")
	configtest.Run(t, ReadSettings, []configtest.Case[*Settings]{
		{Name: "servers, audit and redacted secrets", Env: map[string]string{
			"RELAY_MCP_CONFIG":          mcpJSON,
			"RELAY_DATA_DIR":            dir,
			"RELAY_MCP_HEALTH_INTERVAL": "5s",
			"GITHUB_TOKEN":              "ghp_knownsecretvalue1234",
			"RELAY_REDACT_SECRETS":      "MY_VENDOR_KEY",
			"MY_VENDOR_KEY":             "vendor-secret-value-5678",
		}, Check: func(s *Settings) bool {
			out, changed := s.Runner.Redactor.String("a ghp_knownsecretvalue1234 and vendor-secret-value-5678")
			return s.ConfigPath == mcpJSON && len(s.Servers) == 1 && s.Servers[0].Name == "echo" && !s.PolicySet &&
				s.Runner.HealthInterval == 5*time.Second && s.Runner.AuditPath == filepath.Join(dir, "audit", "tools.jsonl") &&
				changed && !strings.Contains(out, "knownsecret") && !strings.Contains(out, "vendor-secret")
		}},
		// No default ./mcp.json is no servers; a missing explicit file or
		// policy stops startup.
		{Name: "no default mcp.json", Env: map[string]string{"RELAY_DATA_DIR": dir}, Check: func(s *Settings) bool {
			return len(s.Servers) == 0 && s.ConfigPath == "./mcp.json"
		}},
		{Name: "missing files", Env: map[string]string{"RELAY_MCP_CONFIG": filepath.Join(dir, "none.json"), "RELAY_POLICY": filepath.Join(dir, "none.yaml")},
			WantErr: []string{"RELAY_MCP_CONFIG", "RELAY_POLICY"}},
		{Name: "binding names an unknown server", Env: map[string]string{"RELAY_MCP_CONFIG": mcpJSON, "RELAY_DATA_DIR": dir, "RELAY_POLICY": unbound},
			WantErr: []string{"RELAY_POLICY", `server "jira" is not in mcp.json`}},
		// The notice channel takes the conversation ids the approvals worker
		// takes, and its error lists them all.
		{Name: "a DM as notice channel", Env: map[string]string{"RELAY_DATA_DIR": dir, "RELAY_OPS_CHANNEL": "D0OPSDM1"}, Check: func(s *Settings) bool {
			return s.NoticeChannel == "D0OPSDM1"
		}},
		{Name: "not a channel id", Env: map[string]string{"RELAY_DATA_DIR": dir, "RELAY_OPS_CHANNEL": "#ops"},
			WantErr: []string{"RELAY_OPS_CHANNEL", `"#ops" is not a Slack channel id (C…, G…, D…)`}},
	})
}

// TestOAuthSettings: RELAY_SECRET_KEY is a startup error only when an entry
// logs in with OAuth; it is redacted from results; a short key is refused.
func TestOAuthSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	oauth := filepath.Join(dir, "oauth.json")
	testenv.WriteFile(t, oauth, `{"servers": {"gh": {"url": "https://example.com/mcp", "oauth": {"scopes": ["repo"]}}}}`)
	plain := filepath.Join(dir, "plain.json")
	testenv.WriteFile(t, plain, `{"servers": {"gh": {"url": "https://example.com/mcp"}}}`)
	key := "oauth-settings-test-key-0123456789abcdef"
	configtest.Run(t, ReadSettings, []configtest.Case[*Settings]{
		{Name: "oauth entry without a key", Env: map[string]string{"RELAY_MCP_CONFIG": oauth, "RELAY_DATA_DIR": dir},
			WantErr: []string{"RELAY_SECRET_KEY", "server gh"}},
		{Name: "no oauth entry, no key", Env: map[string]string{"RELAY_MCP_CONFIG": plain, "RELAY_DATA_DIR": dir},
			Check: func(s *Settings) bool { return !s.OAuth.SecretKey.IsSet() }},
		{Name: "short key", Env: map[string]string{"RELAY_MCP_CONFIG": plain, "RELAY_DATA_DIR": dir, "RELAY_SECRET_KEY": "short"},
			WantErr: []string{"RELAY_SECRET_KEY", "shorter than 32"}},
		{Name: "key, redirect and metadata URLs", Env: map[string]string{"RELAY_MCP_CONFIG": oauth, "RELAY_DATA_DIR": dir, "RELAY_SECRET_KEY": key,
			"RELAY_OAUTH_REDIRECT_URL": "http://127.0.0.1:8765/callback", "RELAY_OAUTH_CLIENT_METADATA_URL": "https://relay.example.com/oauth/client-metadata.json"},
			Check: func(s *Settings) bool {
				out, _ := s.Runner.Redactor.String("key " + key)
				_, err := s.OAuth.Sealer()
				return err == nil && s.OAuth.RedirectURL == "http://127.0.0.1:8765/callback" && !strings.Contains(out, key) &&
					s.OAuth.ClientMetadataURL == "https://relay.example.com/oauth/client-metadata.json"
			}},
		{Name: "metadata URL must be https", Env: map[string]string{"RELAY_MCP_CONFIG": plain, "RELAY_DATA_DIR": dir,
			"RELAY_OAUTH_CLIENT_METADATA_URL": "http://relay.example.com/m.json"}, WantErr: []string{"RELAY_OAUTH_CLIENT_METADATA_URL"}},
	})
}
