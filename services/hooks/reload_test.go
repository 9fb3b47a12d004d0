package hooks

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
)

type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func hookFile(name string) string {
	return "hooks:\n  - name: " + name + "\n    on: [github.issues.opened]\n    actions:\n      - type: mcp\n        parameters: {serverId: s, toolName: t}\n"
}

// TestReloadOnEdit: a valid edit takes effect; an invalid one keeps the
// hooks in force and says why.
func TestReloadOnEdit(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	path := filepath.Join(t.TempDir(), "hooks.yaml")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(path, []byte(hookFile("first")), 0o600))
	f, err := Load(path)
	must(err)
	var logs logBuf
	s, err := New(t.Context(), Config{Hooks: f, Path: path, ReloadInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, b)
	must(err)
	testenv.Go(t, "watch", func(ctx context.Context) error { s.watch(ctx, path, 10*time.Millisecond); return nil })

	must(os.WriteFile(path, []byte(hookFile("second")), 0o600))
	testenv.WaitFor(t, 10*time.Second, "the edit in force", func() bool { return s.Hooks().Hook("second") != nil })

	must(os.WriteFile(path, []byte(hookFile("third")+"        colour: red\n"), 0o600))
	testenv.WaitFor(t, 10*time.Second, "the invalid edit refused", func() bool { return strings.Contains(logs.String(), "colour") })
	if s.Hooks().Hook("second") == nil || s.Hooks().Hook("third") != nil {
		t.Errorf("after an invalid edit: got hooks %v, want second still in force", s.Hooks().Hooks)
	}
	if !strings.Contains(logs.String(), "edit refused; the previous hooks stay in force") {
		t.Errorf("log: got %q, want the refusal said", logs.String())
	}
}
