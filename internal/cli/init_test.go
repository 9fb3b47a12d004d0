package cli

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/services/hooks"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// `relay init` writes the four starter files, and what it wrote loads with
// the relay's own loaders: the .env passes every service's settings check
// (the files it names included), mcp.json, policy.yaml and hooks.yaml load.
func TestInitWritesLoadableFiles(t *testing.T) {
	dir := t.TempDir()
	run := cliRunner(t, map[string]string{})
	code, out, errOut := run("init", "-dir", dir)
	if code != 0 {
		t.Fatalf("relay init: exit %d: %s%s", code, out, errOut)
	}
	for _, name := range []string{".env", "mcp.json", "policy.yaml", "hooks.yaml"} {
		if !strings.Contains(out, "wrote   "+filepath.Join(dir, name)) {
			t.Errorf("output does not say it wrote %s:\n%s", name, out)
		}
	}
	st, err := os.Stat(filepath.Join(dir, ".env"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf(".env mode %v, want 0600 (it holds secrets)", st.Mode().Perm())
	}

	vars, err := mcpconfig.ParseEnvFile(readFile(t, filepath.Join(dir, ".env")))
	if err != nil {
		t.Fatalf(".env: %v", err)
	}
	for _, name := range []string{"GITHUB_WEBHOOK_SECRET", "OPENPROJECT_WEBHOOK_SECRET", "RELAY_WEBHOOK_SECRET",
		"RELAY_CONSOLE_TOKEN", "RELAY_SECRET_KEY"} {
		if len(vars[name]) < 32 {
			t.Errorf(".env: %s = %q, want a generated secret of at least 32 characters", name, vars[name])
		}
	}
	for _, name := range []string{"GITHUB_WEBHOOK_SECRET", "RELAY_CONSOLE_TOKEN", "RELAY_SECRET_KEY"} {
		if v := vars[name]; v != "" && strings.Contains(out+errOut, v) {
			t.Errorf("relay init printed the generated %s", name)
		}
	}

	// The settings check of every service, run from the folder (the .env
	// names ./mcp.json, ./policy.yaml and ./hooks.yaml).
	t.Chdir(dir)
	vars["RELAY_DATA_DIR"] = filepath.Join(dir, "data")
	a := &app{env: config.FromMap(vars), log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	a.readBase()
	if err := a.checkEnv(); err != nil {
		t.Errorf("the generated .env does not pass the relay's settings check: %v", err)
	}

	servers, err := mcpconfig.Load("mcp.json", mcpconfig.Options{})
	if err != nil {
		t.Fatalf("mcp.json: %v", err)
	}
	if len(servers) != 1 || servers[0].Name != "everything" {
		t.Errorf("mcp.json servers = %+v, want the reference server", servers)
	}
	pol, err := mcpconfig.LoadPolicy("policy.yaml")
	if err != nil {
		t.Fatalf("policy.yaml: %v", err)
	}
	if !pol.Allowed("agent", "everything", "echo") || pol.Allowed("nobody", "everything", "echo") {
		t.Error("policy.yaml: want role agent allowed everything.echo, an unknown role not")
	}
	if _, err := hooks.Load("hooks.yaml"); err != nil {
		t.Errorf("hooks.yaml: %v", err)
	}
}

// A second `relay init` overwrites nothing and says which files it kept.
func TestInitKeepsExistingFiles(t *testing.T) {
	dir := t.TempDir()
	mine := "# my own\nRELAY_HTTP_ADDR=:9999\n"
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(mine), 0o600); err != nil {
		t.Fatal(err)
	}
	run := cliRunner(t, map[string]string{})
	code, out, _ := run("init", "-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out, "kept    "+filepath.Join(dir, ".env")) || !strings.Contains(out, "wrote   "+filepath.Join(dir, "mcp.json")) {
		t.Errorf("output:\n%s", out)
	}
	if got := string(readFile(t, filepath.Join(dir, ".env"))); got != mine {
		t.Errorf(".env overwritten: %q", got)
	}
	policy := string(readFile(t, filepath.Join(dir, "policy.yaml")))
	code, out, _ = run("init", "-dir", dir)
	if code != 0 || strings.Contains(out, "wrote") || strings.Count(out, "kept") != 4 {
		t.Errorf("second init: exit %d:\n%s", code, out)
	}
	if got := string(readFile(t, filepath.Join(dir, "policy.yaml"))); got != policy {
		t.Error("policy.yaml changed by a second init")
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
