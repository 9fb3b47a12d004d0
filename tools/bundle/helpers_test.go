package bundle

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/relaystation/relay/internal/testenv"
)

// readFile is testenv.ReadFile as a string.
func readFile(t testing.TB, path string) string {
	t.Helper()
	return string(testenv.ReadFile(t, path))
}

// repoRoot is the module's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// newInstaller is an installer for a fresh mcp.json in a temp dir holding
// content ("" for none).
func newInstaller(t testing.TB, content string) *Installer {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mcp.json")
	if content != "" {
		testenv.WriteFile(t, cfg, content)
	}
	return &Installer{Config: cfg, DataDir: filepath.Join(dir, "data"), Lookup: lookupOf(nil)}
}

// lookupOf is an Installer.Lookup that sees env as the relay's environment
// (the machine's is not used: the tests do not depend on it).
func lookupOf(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}
