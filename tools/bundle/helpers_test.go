package bundle

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/relaystation/relay/internal/testenv"
)

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
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
