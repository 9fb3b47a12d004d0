package toolrunner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/bundle"
	"github.com/relaystation/relay/tools/toolstest"
)

type reloadEvent struct {
	res tools.ReloadResult
	err error
}

// startWatchedRunner starts a tool runner on the config file cfg and a
// ConfigWatcher on it, both stopped when the test ends, and returns the
// runner and the watcher's reloads.
func startWatchedRunner(t *testing.T, cfg string) (*tools.Runner, <-chan reloadEvent) {
	t.Helper()
	r := toolstest.Start(t, tools.Config{ConfigPath: cfg, BaseEnv: tools.BaseEnvFrom(os.Environ()), HealthInterval: time.Second})
	events := make(chan reloadEvent, 16)
	w := &ConfigWatcher{Path: cfg, OnReload: func(res tools.ReloadResult, err error) { events <- reloadEvent{res, err} }}
	testenv.Go(t, "config watcher", func(ctx context.Context) error { return w.Run(ctx, r) })
	return r, events
}

// nextReload returns the next reload, failing the test after 15s; what
// names the reload awaited.
func nextReload(t *testing.T, events <-chan reloadEvent, what string) reloadEvent {
	t.Helper()
	return testenv.Receive(t, events, 15*time.Second, "a reload "+what)
}

func TestConfigWatcherHotReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mcp.json")
	testenv.WriteFile(t, cfg, "{\n  // nothing yet\n  \"mcpServers\": {}\n}\n")
	r, events := startWatchedRunner(t, cfg)

	in := &bundle.Installer{Config: cfg, DataDir: filepath.Join(dir, "data")}
	if _, err := in.Install(t.Context(), toolstest.EverythingBundle(t), bundle.Options{}); err != nil {
		t.Fatal(err)
	}
	if ev := nextReload(t, events, "after install"); ev.err != nil || strings.Join(ev.res.Added, ",") != "ref__everything" {
		t.Fatalf("got %+v, want ref__everything added", ev)
	}
	toolstest.Ready(t, r)
	call := func() *tools.Result {
		return r.Call(t.Context(), tools.Request{Tool: "ref__everything.echo", Args: map[string]any{"message": "hot"}, Operator: true})
	}
	if res := call(); res.Err != nil || !strings.Contains(res.Text, "Echo: hot") {
		t.Fatalf("call after hot reload: %v %q", res.Err, res.Text)
	}

	// An invalid file keeps the running servers and is reported once.
	good, _ := os.ReadFile(cfg)
	bad := strings.Replace(string(good), `"command"`, `"comand"`, 1)
	for range 2 {
		testenv.WriteFile(t, cfg, bad)
	}
	if ev := nextReload(t, events, "invalid file"); ev.err == nil || !strings.Contains(ev.err.Error(), "comand") {
		t.Fatalf("got %+v, want the problem named", ev)
	}
	if res := call(); res.Err != nil {
		t.Fatalf("server lost to an invalid file: %v", res.Err)
	}

	// Uninstall (after the user fixes the file) stops the server.
	testenv.WriteFile(t, cfg, string(good))
	if _, err := in.Uninstall(t.Context(), "ref", bundle.Options{}); err != nil {
		t.Fatal(err)
	}
	ev := nextReload(t, events, "after uninstall")
	for ev.err == nil && len(ev.res.Removed) == 0 {
		ev = nextReload(t, events, "after uninstall")
	}
	if ev.err != nil || strings.Join(ev.res.Removed, ",") != "ref__everything" {
		t.Fatalf("got %+v, want ref__everything removed", ev)
	}
	select {
	case ev := <-events:
		t.Errorf("unexpected reload %+v", ev)
	default:
	}
}

// A bundle installed into the mcp.json of a running tool runner is called
// over the bus without a restart, under a capability naming it.
func TestInstallIntoRunningService(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mcp.json")
	testenv.WriteFile(t, cfg, "{\"servers\": {}}\n")
	b := bustest.Embedded(t)
	pol := toolstest.Policy(t, "roles:\n  - role: agent\n    capabilities: ['ref__everything.echo']\n")
	svc, err := New(t.Context(), Config{Logger: testenv.Logger(t, slog.LevelWarn), WatchConfig: true, Tools: tools.Config{
		ConfigPath: cfg, Policy: pol, BaseEnv: tools.BaseEnvFrom(os.Environ()), HealthInterval: time.Second,
	}}, b)
	if err != nil {
		t.Fatal(err)
	}
	// A reload that changed the servers tells the hooks workers and the
	// other runners to drop their tool lists.
	refreshes, err := b.Conn().SubscribeSync(b.Subject(tools.SubjectRefresh))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, "Run", svc.Run)
	results := bustest.Observe(t, b, "obs-bundle-result", envelope.SubjectToolResult)

	in := &bundle.Installer{Config: cfg, DataDir: filepath.Join(dir, "data")}
	if _, err := in.Install(t.Context(), toolstest.EverythingBundle(t), bundle.Options{}); err != nil {
		t.Fatal(err)
	}
	if m, err := refreshes.NextMsg(10 * time.Second); err != nil {
		t.Errorf("no refresh announced after the install's reload: %v", err)
	} else if m.Reply != "" || string(m.Data) != "{}" {
		t.Errorf("refresh announced as %q (reply %q), want a notification of every server", m.Data, m.Reply)
	}
	// Once the added server's first connect attempt is over (its tools are
	// listed), the runner announces again: a list taken in between (the
	// agent's next task) lacked the new server.
	if _, err := refreshes.NextMsg(30 * time.Second); err != nil {
		t.Errorf("no second refresh once the added server had connected: %v", err)
	}
	if st, err := tools.StatusRemote(t.Context(), b.Conn(), b.Prefix()); err != nil || len(st.Pending) > 0 {
		t.Errorf("after the second refresh: pending %v (%v), want none", st.Pending, err)
	}
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		st, err := tools.StatusRemote(t.Context(), b.Conn(), b.Prefix())
		if err != nil {
			return false, err.Error()
		}
		for _, s := range st.Servers {
			if s.Name == "ref__everything" && s.State == tools.StateReady {
				return true, ""
			}
		}
		return false, fmt.Sprintf("servers %+v", st.Servers)
	})
	call := toolCall("ref__everything.echo", "agent", map[string]any{"message": "installed live"})
	if _, err := b.Publish(t.Context(), envelope.SubjectToolCall, call); err != nil {
		t.Fatal(err)
	}
	if got := next(t, results); got.Content != "Echo: installed live" {
		t.Fatalf("result %q, want Echo: installed live", got.Content)
	}
}
