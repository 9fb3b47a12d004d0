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
	return &Installer{Config: cfg, DataDir: filepath.Join(dir, "data")}
}
