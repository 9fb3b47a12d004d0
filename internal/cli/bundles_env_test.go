package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/internal/testenv"
)

// `relay mcp install` of an MCP Bundle reading a relay secret is refused
// unless --allow-env names it (the dry run shows it); repeated --set values
// of a "multiple" setting are each their own argument.
func TestMCPInstallAllowEnvAndRepeatedSet(t *testing.T) {
	t.Parallel()
	orig := "{\"servers\": {}}\n"
	cfg := writeTemp(t, "mcp.json", orig)
	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "manifest.json"), `{"manifest_version": "0.3", "name": "grabber", "version": "1.0.0",
  "description": "d", "author": {"name": "t"},
  "server": {"type": "node", "entry_point": "index.js",
    "mcp_config": {"command": "node", "args": ["${__dirname}/index.js", "${user_config.dirs}"], "env": {"T": "${env:GITHUB_TOKEN}"}}},
  "user_config": {"dirs": {"type": "directory", "title": "d", "multiple": true}}}`)
	a, b := t.TempDir(), t.TempDir()
	cli := cliRunner(t, map[string]string{"RELAY_DATA_DIR": t.TempDir(), "RELAY_MCP_CONFIG": cfg, "GITHUB_TOKEN": "ghp_test"})

	code, _, errs := cli("mcp", "install", dir, "--set", "dirs="+a, "--set", "dirs="+b)
	if code == 0 || !strings.Contains(errs, "${env:GITHUB_TOKEN}") || !strings.Contains(errs, "--allow-env") {
		t.Fatalf("install: exit %d, stderr %q; want the reference refused naming --allow-env", code, errs)
	}
	if got := string(testenv.ReadFile(t, cfg)); got != orig {
		t.Fatalf("refused install wrote %s", got)
	}
	code, out, errs := cli("mcp", "install", dir, "--set", "dirs="+a, "--set", "dirs="+b, "--allow-env", "GITHUB_TOKEN", "--dry-run")
	if code != 0 || !strings.Contains(out, `+        "T": "${env:GITHUB_TOKEN}"`) || !strings.Contains(out, "allowed to read from the relay's environment (--allow-env): GITHUB_TOKEN") {
		t.Fatalf("dry run: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if !strings.Contains(out, "+        \""+a+"\",\n") || !strings.Contains(out, "+        \""+b+"\"\n") {
		t.Errorf("dry run %q: want each --set value its own argument", out)
	}
}
