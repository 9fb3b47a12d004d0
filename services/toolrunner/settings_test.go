package toolrunner

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
	dir := t.TempDir()
	mcpJSON := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(mcpJSON, []byte(`{"mcpServers": {"echo": {"command": "echo-server", "args": ["--stdio"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := config.FromMap(map[string]string{
		"RELAY_MCP_CONFIG":          mcpJSON,
		"RELAY_DATA_DIR":            dir,
		"RELAY_MCP_HEALTH_INTERVAL": "5s",
		"GITHUB_TOKEN":              "ghp_knownsecretvalue1234",
		"RELAY_REDACT_SECRETS":      "MY_VENDOR_KEY",
		"MY_VENDOR_KEY":             "vendor-secret-value-5678",
	})
	s := ReadSettings(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	if s.ConfigPath != mcpJSON || len(s.Servers) != 1 || s.Servers[0].Name != "echo" || s.PolicySet {
		t.Errorf("got path %s, servers %+v, policy set %v", s.ConfigPath, s.Servers, s.PolicySet)
	}
	if s.Runner.HealthInterval != 5*time.Second || s.Runner.AuditPath != filepath.Join(dir, "audit", "tools.jsonl") {
		t.Errorf("got health interval %s, audit %s", s.Runner.HealthInterval, s.Runner.AuditPath)
	}
	out, changed := s.Runner.Redactor.String("a ghp_knownsecretvalue1234 and vendor-secret-value-5678")
	if !changed || strings.Contains(out, "knownsecret") || strings.Contains(out, "vendor-secret") {
		t.Errorf("redactor: got %q, want both secrets removed", out)
	}

	// No default ./mcp.json is no servers; a missing explicit file or
	// policy stops startup.
	none := config.FromMap(map[string]string{"RELAY_DATA_DIR": dir})
	if s := ReadSettings(none); none.Err() != nil || len(s.Servers) != 0 || s.ConfigPath != "./mcp.json" {
		t.Errorf("default: got %v, servers %v, path %s", none.Err(), s.Servers, s.ConfigPath)
	}
	bad := config.FromMap(map[string]string{"RELAY_MCP_CONFIG": filepath.Join(dir, "none.json"), "RELAY_POLICY": filepath.Join(dir, "none.yaml")})
	ReadSettings(bad)
	for _, want := range []string{"RELAY_MCP_CONFIG", "RELAY_POLICY"} {
		if err := bad.Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %s", err, want)
		}
	}

	// A binding naming a server mcp.json lacks stops startup.
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("bindings:\n  - slack: {channel: C0OPS}\n    servers: [echo, jira]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unbound := config.FromMap(map[string]string{"RELAY_MCP_CONFIG": mcpJSON, "RELAY_DATA_DIR": dir, "RELAY_POLICY": pol})
	ReadSettings(unbound)
	if err := unbound.Err(); err == nil || !strings.Contains(err.Error(), `RELAY_POLICY`) || !strings.Contains(err.Error(), `server "jira" is not in mcp.json`) {
		t.Errorf("got %v, want RELAY_POLICY naming the unknown server jira", err)
	}
}
