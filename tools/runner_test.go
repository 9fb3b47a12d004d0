package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools/mcpconfig"
)

const allowAll = "roles:\n  - role: agent\n    capabilities: ['*.*']\n"

func TestEverythingStdio(t *testing.T) {
	t.Parallel()
	r, _, reg := everythingStdioRunner(t)
	caller := Caller{AgentID: "agent-1", Role: "agent"}

	t.Run("echo", func(t *testing.T) {
		res := r.Call(t.Context(), Request{Tool: "everything.echo", Args: map[string]any{"message": "hi"}, Caller: caller})
		if res.Err != nil || res.Text != "Echo: hi" || res.Status != StatusSuccess {
			t.Fatalf("got %q, %v, %s; want Echo: hi", res.Text, res.Err, res.Status)
		}
	})
	t.Run("get-sum", func(t *testing.T) {
		res := r.Call(t.Context(), Request{Tool: "everything.get-sum", Args: map[string]any{"a": 2, "b": 40.5}, Caller: caller})
		if res.Err != nil || !strings.Contains(res.Text, "42.5") {
			t.Fatalf("got %q, %v; want the sum 42.5", res.Text, res.Err)
		}
	})
	t.Run("invalid arguments never reach the server", func(t *testing.T) {
		res := r.Call(t.Context(), Request{Tool: "everything.get-sum", Args: map[string]any{"a": "two"}, Caller: caller})
		if !errors.Is(res.Err, ErrInvalidArguments) || res.Attempts != 0 || res.Status != StatusError {
			t.Fatalf("got %v (attempts %d, %s); want ErrInvalidArguments before sending", res.Err, res.Attempts, res.Status)
		}
	})
	t.Run("structured content validated", func(t *testing.T) {
		res := r.Call(t.Context(), Request{Tool: "everything.get-structured-content", Args: map[string]any{"location": "Chicago"}, Caller: caller})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		m, _ := res.Structured.(map[string]any)
		if m["temperature"] != float64(36) {
			t.Errorf("got structured %v, want temperature 36", res.Structured)
		}
	})
	t.Run("env injection and redaction", func(t *testing.T) { checkEnvRedacted(t, r, caller) })
	t.Run("progress", func(t *testing.T) { checkProgress(t, r, caller) })
	t.Run("timeout", func(t *testing.T) { checkTimeout(t, r, caller) })
	t.Run("tools filtered by role", func(t *testing.T) {
		got := r.Tools(t.Context(), "reader")
		if len(got) != 1 || got[0].Name != "everything.echo" || got[0].InputSchema == nil || !got[0].ReadOnly {
			t.Fatalf("got %+v, want only everything.echo with its schema", got)
		}
		if n := len(r.Tools(t.Context(), "agent")); n != 5 {
			t.Errorf("agent sees %d tools, want 5", n)
		}
		if n := len(r.Tools(t.Context(), "nobody")); n != 0 {
			t.Errorf("unknown role sees %d tools, want 0", n)
		}
	})
	t.Run("status and metrics", func(t *testing.T) { checkStatusAndMetrics(t, r, reg) })
}

// everythingStdioRunner starts a runner on the everything server over stdio,
// with an injected variable, a secret to redact, two roles and its own
// metrics registry.
func everythingStdioRunner(t *testing.T) (*Runner, Config, *prometheus.Registry) {
	t.Helper()
	srv := everythingStdio(t, "everything")
	srv.Env = map[string]string{"RELAY_INJECTED": "hello-from-mcp-json", "API_KEY": "sk-live-0123456789abcdef"}
	cfg := fastConfig(t, srv)
	cfg.BaseEnv = []string{"PATH=" + os.Getenv("PATH")}
	cfg.Policy = policy(t, `
roles:
  - role: agent
    capabilities: ["everything.echo", "everything.get-sum", "everything.get-env", "everything.get-structured-content", "everything.trigger-long-running-operation"]
  - role: reader
    capabilities: ["everything.echo"]
`)
	cfg.Redactor = NewRedactor(secret.New("sk-live-0123456789abcdef"))
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	return startRunner(t, cfg), cfg, reg
}

// checkEnvRedacted checks that the server sees the injected variable and only
// the base environment, and that the secret in its answer is redacted in the
// result and flagged in the audit record.
func checkEnvRedacted(t *testing.T, r *Runner, caller Caller) {
	t.Helper()
	res := r.Call(t.Context(), Request{Tool: "everything.get-env", Caller: caller})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if !strings.Contains(res.Text, "hello-from-mcp-json") {
		t.Errorf("injected variable missing from %s", res.Text)
	}
	if strings.Contains(res.Text, "sk-live-0123456789abcdef") || !strings.Contains(res.Text, Redacted) || !res.Redacted {
		t.Errorf("secret not redacted (redacted=%v): %s", res.Redacted, res.Text)
	}
	if strings.Contains(res.Text, "HOME") {
		t.Errorf("relay environment leaked into the server beyond the base env: %s", res.Text)
	}
	recs := readAudit(t, r)
	i := slices.IndexFunc(recs, func(r Record) bool { return r.AuditIDMatches(res.AuditID) })
	if i < 0 || !recs[i].Redacted || recs[i].Tool != "get-env" {
		t.Errorf("audit record %s: got %+v, want redaction_applied", res.AuditID, recs)
	}
}

// checkProgress checks that progress notifications reach the caller.
func checkProgress(t *testing.T, r *Runner, caller Caller) {
	t.Helper()
	var n atomic.Int32
	res := r.Call(t.Context(), Request{Tool: "everything.trigger-long-running-operation", Args: map[string]any{"duration": 0.3, "steps": 3}, Caller: caller,
		Progress: func(p ProgressEvent) {
			if p.Total == 3 {
				n.Add(1)
			}
		}})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	// The last notification may race the result; the ones before it may not.
	if n.Load() < 1 {
		t.Errorf("got %d progress notifications, want some of 3", n.Load())
	}
}

// checkTimeout checks that a call ends at the caller's deadline and that the
// session survives it.
func checkTimeout(t *testing.T, r *Runner, caller Caller) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	res := r.Call(ctx, Request{Tool: "everything.trigger-long-running-operation", Args: map[string]any{"duration": 10, "steps": 2}, Caller: caller})
	if !errors.Is(res.Err, ErrTimeout) || res.Status != StatusTimeout {
		t.Fatalf("got %v (%s), want a timeout", res.Err, res.Status)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %s, want about the caller's 1s deadline", d)
	}
	// The session survives a timed-out call.
	if res := r.Call(t.Context(), Request{Tool: "everything.echo", Args: map[string]any{"message": "still"}, Caller: caller}); res.Err != nil {
		t.Errorf("call after timeout: %v", res.Err)
	}
}

// checkStatusAndMetrics checks the server's status and the runner's counters.
func checkStatusAndMetrics(t *testing.T, r *Runner, reg *prometheus.Registry) {
	t.Helper()
	// A health check may have failed under load a moment ago (a slow ping
	// drops the session and the next check reconnects): wait for ready.
	var st ServerStatus
	deadline := time.Now().Add(20 * time.Second)
	for {
		st = r.Servers()[0]
		if st.State == StateReady || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.State != StateReady || st.ProtocolVersion != mcpconfig.DefaultProtocolVersion || st.Tools == 0 || st.Handshake <= 0 {
		t.Errorf("got %+v, want ready on %s with tools", st, mcpconfig.DefaultProtocolVersion)
	}
	if v := counterValue(t, reg, "relay_tool_invocations_total", map[string]string{"server": "everything", "tool": "echo", "status": "success"}); v < 1 {
		t.Errorf("echo successes = %v, want >= 1", v)
	}
	if v := counterValue(t, reg, "relay_tool_handshake_seconds", map[string]string{"server": "everything"}); v < 1 {
		t.Errorf("handshakes observed = %v, want >= 1", v)
	}
}

// AuditIDMatches reports whether the record has the id.
func (r Record) AuditIDMatches(id string) bool { return r.ID == id }

func TestEverythingStreamableHTTP(t *testing.T) {
	t.Parallel()
	url := startEverythingHTTP(t)
	cfg := fastConfig(t, mcpconfig.Server{Name: "remote", Type: mcpconfig.HTTP, URL: url, Headers: map[string]string{"X-Relay-Test": "1"},
		ProtocolVersion: mcpconfig.DefaultProtocolVersion})
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	c := Caller{Role: "agent"}
	res := r.Call(t.Context(), Request{Tool: "remote.echo", Args: map[string]any{"message": "over http"}, Caller: c})
	if res.Err != nil || res.Text != "Echo: over http" {
		t.Fatalf("got %q, %v", res.Text, res.Err)
	}
	res = r.Call(t.Context(), Request{Tool: "remote.get-sum", Args: map[string]any{"a": 1, "b": 2}, Caller: c})
	if res.Err != nil || !strings.Contains(res.Text, "3") {
		t.Fatalf("got %q, %v", res.Text, res.Err)
	}
	var n atomic.Int32
	res = r.Call(t.Context(), Request{Tool: "remote.trigger-long-running-operation", Args: map[string]any{"duration": 0.3, "steps": 3}, Caller: c,
		Progress: func(ProgressEvent) { n.Add(1) }})
	// The last notification is not lost to the result.
	if res.Err != nil || n.Load() != 3 {
		t.Fatalf("got %v with %d progress notifications, want all 3", res.Err, n.Load())
	}
	p := ProbeServer(t.Context(), Config{}, cfg.Servers[0])
	if !p.OK || p.ProtocolVersion != mcpconfig.DefaultProtocolVersion || !slices.Contains(p.Tools, "echo") || p.Handshake <= 0 {
		t.Errorf("probe: got %+v", p)
	}
}

func TestFilesystemToolErrors(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	testenv.WriteFile(t, filepath.Join(root, "a.txt"), "alpha\n")
	srv := mcpconfig.Server{Name: "fs", Type: mcpconfig.Stdio, Command: testenv.NPMBin(t, "mcp-server-filesystem"), Args: []string{root},
		ProtocolVersion: mcpconfig.DefaultProtocolVersion}
	cfg := fastConfig(t, srv)
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	c := Caller{Role: "agent"}
	res := r.Call(t.Context(), Request{Tool: "fs.read_text_file", Args: map[string]any{"path": filepath.Join(root, "a.txt")}, Caller: c})
	if res.Err != nil || !strings.Contains(res.Text, "alpha") {
		t.Fatalf("read inside root: got %q, %v", res.Text, res.Err)
	}
	tests := []struct {
		name string
		args map[string]any
	}{
		{"outside the allowed directory", map[string]any{"path": "/etc/hostname"}},
		{"missing file", map[string]any{"path": filepath.Join(root, "nope.txt")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := r.Call(t.Context(), Request{Tool: "fs.read_text_file", Args: tt.args, Caller: c})
			var te *ToolError
			if !errors.As(res.Err, &te) || te.Message == "" || res.Status != StatusError {
				t.Fatalf("got %v (%s), want a *ToolError with the server's message", res.Err, res.Status)
			}
			if !errors.Is(res.Err, ErrToolFailed) {
				t.Errorf("errors.Is(ErrToolFailed) = false for %v", res.Err)
			}
		})
	}
	if st := r.Servers()[0]; st.Breaker != "closed" {
		t.Errorf("tool errors must not open the breaker: got %s", st.Breaker)
	}
}

func TestPolicyOutcomesAreAudited(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := fastConfig(t, helperServer(t, "h", dir), helperServer(t, "off", t.TempDir()))
	cfg.Servers[1].Disabled = true
	cfg.Policy = policy(t, `
roles:
  - role: agent
    capabilities: ["h.*", "off.*"]
  - role: reader
    capabilities: ["h.echo"]
budgets:
  h.echo: {rps: 0.001, burst: 1}
  h.fail: {daily_quota: 1}
`)
	r := startRunner(t, cfg)
	agent := Caller{AgentID: "a-7", Role: "agent"}
	call := func(tool string, c Caller) *Result {
		var args map[string]any
		if strings.HasSuffix(tool, ".echo") {
			args = map[string]any{"message": "x"}
		}
		return r.Call(t.Context(), Request{CallID: "call-" + tool, TaskID: "task-1", Tool: tool, Args: args, Caller: c})
	}
	steps := []struct {
		name   string
		run    func() *Result
		status Status
		is     error
	}{
		{"allowed", func() *Result { return call("h.echo", agent) }, StatusSuccess, nil},
		{"rate limited", func() *Result { return call("h.echo", agent) }, StatusRateLimited, ErrRateLimited},
		{"capability denied", func() *Result { return call("h.fail", Caller{Role: "reader"}) }, StatusPermissionDenied, ErrPermissionDenied},
		{"no role", func() *Result { return call("h.echo", Caller{}) }, StatusPermissionDenied, ErrPermissionDenied},
		{"quota first use", func() *Result { return call("h.fail", agent) }, StatusError, ErrToolFailed},
		{"quota exhausted", func() *Result { return call("h.fail", agent) }, StatusRateLimited, ErrQuotaExhausted},
		{"disabled server", func() *Result { return call("off.echo", agent) }, StatusDisabled, ErrDisabled},
		{"unknown server", func() *Result { return call("nope.echo", agent) }, StatusError, ErrUnknownServer},
		{"unknown tool", func() *Result { return call("h.nope", agent) }, StatusError, ErrUnknownTool},
		{"stop switch", func() *Result { r.SetStop(true); defer r.SetStop(false); return call("h.slow", agent) }, StatusDisabled, ErrStopped},
		{"bad output", func() *Result { return call("h.bad-output", agent) }, StatusError, ErrInvalidOutput},
	}
	for _, s := range steps {
		res := s.run()
		if res.Status != s.status || (s.is == nil) != (res.Err == nil) || s.is != nil && !errors.Is(res.Err, s.is) {
			t.Errorf("%s: got %s, %v; want %s, %v", s.name, res.Status, res.Err, s.status, s.is)
		}
	}
	if fileExists(dir, "slow-started") {
		t.Error("the stop switch let a call through")
	}
	recs := readAudit(t, r)
	if len(recs) != len(steps) {
		t.Fatalf("got %d audit records, want %d", len(recs), len(steps))
	}
	for i, s := range steps {
		rec := recs[i]
		if rec.Status != s.status || uuid.Validate(rec.ID) != nil || rec.TaskID != "task-1" || rec.RunID != "task-1" || rec.Time.IsZero() || len(rec.ArgsSHA256) != 64 {
			t.Errorf("%s: audit record %+v, want status %s with ids and hash", s.name, rec, s.status)
		}
		if s.status != StatusSuccess && rec.Error == "" {
			t.Errorf("%s: audit record without error message", s.name)
		}
	}
	if recs[0].AgentID != "a-7" || recs[0].Role != "agent" || recs[0].Server != "h" || recs[0].Tool != "echo" || recs[0].ArgsSHA256 != ArgsHash(map[string]any{"message": "x"}) {
		t.Errorf("first record: got %+v", recs[0])
	}
	// The isError text is redacted in the error and in the audit log.
	if strings.Contains(recs[4].Error, "ghp_") || !strings.Contains(recs[4].Error, Redacted) {
		t.Errorf("tool error not redacted in audit: %q", recs[4].Error)
	}
	b, _ := os.ReadFile(cfg.AuditPath)
	if strings.Contains(string(b), `"x"`) {
		t.Error("audit log holds raw arguments")
	}
}

func TestKillMidCallBreakerAndRecovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.HealthBackoff = []time.Duration{400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	c := Caller{Role: "agent"}
	pid := r.conns["h"].pid()
	if pid == 0 {
		t.Fatal("no server process")
	}
	done := make(chan *Result, 1)
	go func() {
		done <- r.Call(t.Context(), Request{Tool: "h.slow", Args: map[string]any{"ms": 30000}, Caller: c})
	}()
	testenv.WaitFor(t, 10*time.Second, "the slow call to reach the server", func() bool { return fileExists(dir, "slow-started") })
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var res *Result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not fail after the server was killed")
	}
	if !errors.Is(res.Err, ErrConnection) || res.Status != StatusError || res.Attempts != 1 {
		t.Fatalf("got %v (%s, %d attempts), want one connection error and no retry of a side-effecting tool", res.Err, res.Status, res.Attempts)
	}
	st := r.Servers()[0]
	if st.BreakerOpened < 1 {
		t.Fatalf("breaker never opened: %+v", st)
	}
	testenv.WaitFor(t, 15*time.Second, "health checks to reconnect", func() bool { return r.Servers()[0].State == StateReady })
	if newPID := r.conns["h"].pid(); newPID == pid || newPID == 0 {
		t.Errorf("got pid %d after recovery, want a new process (old %d)", newPID, pid)
	}
	res = r.Call(t.Context(), Request{Tool: "h.echo", Args: map[string]any{"message": "back"}, Caller: c})
	if res.Err != nil || res.Text != "Echo: back" {
		t.Fatalf("after recovery: got %q, %v", res.Text, res.Err)
	}
}

func TestIdempotentToolRetriedAfterCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.CallRetries = 5
	cfg.RetryBackoff = 100 * time.Millisecond
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	res := r.Call(t.Context(), Request{Tool: "h.crash-once", Caller: Caller{Role: "agent"}})
	if res.Err != nil || res.Text != "survived" {
		t.Fatalf("got %q, %v; want the retry to succeed on the restarted server", res.Text, res.Err)
	}
	if res.Attempts < 2 {
		t.Errorf("got %d attempts, want at least 2", res.Attempts)
	}
}

func TestCancellationReachesServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy string
		cancel bool
		status Status
	}{
		{"caller cancels", allowAll, true, StatusCancelled},
		{"budget timeout", allowAll + "budgets:\n  h.slow: {timeout: 1s}\n", false, StatusTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := fastConfig(t, helperServer(t, "h", dir))
			cfg.Policy = policy(t, tt.policy)
			r := startRunner(t, cfg)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tt.cancel {
				go func() {
					testenv.WaitFor(t, 10*time.Second, "slow-started", func() bool { return fileExists(dir, "slow-started") })
					cancel()
				}()
			}
			res := r.Call(ctx, Request{Tool: "h.slow", Args: map[string]any{"ms": 30000}, Caller: Caller{Role: "agent"}})
			if res.Status != tt.status {
				t.Fatalf("got %s (%v), want %s", res.Status, res.Err, tt.status)
			}
			if tt.status == StatusTimeout && !strings.Contains(res.Err.Error(), "1s limit") {
				t.Errorf("got %q, want the timeout to name its limit", res.Err)
			}
			testenv.WaitFor(t, 10*time.Second, "the server to see notifications/cancelled", func() bool { return fileExists(dir, "slow-cancelled") })
			if fileExists(dir, "slow-done") {
				t.Error("the tool ran to completion")
			}
		})
	}
}

func TestHealthAutoDisableAndReenable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	steer(t, dir, "refuse-start", "")
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.Policy = policy(t, allowAll)
	state := NewMemoryState()
	cfg.State = state
	var log recorder[Notice]
	cfg.Notify = log.notify
	r := startUnready(t, cfg)
	// The runner disables the server, persists that, then tells Notify:
	// wait for the notice, the last step.
	testenv.WaitFor(t, 20*time.Second, "auto-disable and its notice", func() bool {
		return r.Servers()[0].State == StateDisabled && len(log.all()) > 0
	})
	st := r.Servers()[0]
	if st.DisabledBy != "health" || !strings.Contains(st.DisabledReason, "3 failed health checks") {
		t.Errorf("got %+v, want disabled by health after 3 failed checks (1 + 2 retries)", st)
	}
	if notices := log.all(); len(notices) != 1 || notices[0].Server != "h" {
		t.Errorf("got notices %+v, want one for h", notices)
	}
	saved, _ := state.Load(t.Context())
	if !saved.Servers["h"].Disabled || saved.Servers["h"].By != "health" {
		t.Errorf("persisted state %+v, want disabled by health", saved)
	}
	res := r.Call(t.Context(), Request{Tool: "h.echo", Args: map[string]any{"message": "x"}, Caller: Caller{Role: "agent"}})
	if res.Status != StatusDisabled {
		t.Errorf("call on disabled server: got %s, want disabled", res.Status)
	}
	// Another process (relay mcp enable) re-enables it through the store.
	if err := os.Remove(filepath.Join(dir, "refuse-start")); err != nil {
		t.Fatal(err)
	}
	if err := state.SetServer(t.Context(), "h", ServerState{Disabled: false, By: "operator"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "ready after enable", func() bool { return r.Servers()[0].State == StateReady })
	if st := r.Servers()[0]; st.Failures != 0 {
		t.Errorf("failures after re-enable: got %d, want 0", st.Failures)
	}
	// And disables it again.
	if err := state.SetServer(t.Context(), "h", ServerState{Disabled: true, By: "operator", Reason: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "disabled by operator", func() bool { return r.Servers()[0].DisabledReason == "maintenance" })
}

// TestToolListChanged: a server's notifications/tools/list_changed drops
// the cached tool list at once: at 2025-11-25 on the session, at
// 2026-07-28 through the subscriptions/listen stream the SDK opens
// (SEP-2575) when the server declares tools.listChanged.
func TestToolListChanged(t *testing.T) {
	t.Parallel()
	for _, version := range []string{mcpconfig.DefaultProtocolVersion, mcpconfig.LatestProtocolVersion} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			toolListChanged(t, version)
		})
	}
}

func toolListChanged(t *testing.T, version string) {
	s := helperServer(t, "h", t.TempDir())
	s.ProtocolVersion = version
	cfg := fastConfig(t, s)
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	if got := r.Servers()[0].ProtocolVersion; got != version {
		t.Fatalf("speaking %s, want %s", got, version)
	}
	has := func() bool {
		return slices.ContainsFunc(r.Tools(t.Context(), "agent"), func(i ToolInfo) bool { return i.Name == "h.added" })
	}
	if has() {
		t.Fatal("h.added listed before it exists")
	}
	if res := r.Call(t.Context(), Request{Tool: "h.add-tool", Caller: Caller{Role: "agent"}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	testenv.WaitFor(t, 10*time.Second, "the cache to drop on notifications/tools/list_changed", has)
	res := r.Call(t.Context(), Request{Tool: "h.added", Caller: Caller{Role: "agent"}})
	if res.Err != nil {
		t.Fatalf("call the new tool: %v", res.Err)
	}
	if m, _ := res.Structured.(map[string]any); m["temperature"] != float64(21) {
		t.Errorf("got structured %v", res.Structured)
	}
}

func TestGlobalConcurrencyLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.Policy = policy(t, allowAll+"limits: {concurrency: 1}\nbudgets:\n  h.echo: {timeout: 1s}\n")
	r := startRunner(t, cfg)
	done := make(chan *Result, 1)
	go func() {
		done <- r.Call(t.Context(), Request{Tool: "h.slow", Args: map[string]any{"ms": 2500}, Caller: Caller{Role: "agent"}})
	}()
	testenv.WaitFor(t, 10*time.Second, "slow-started", func() bool { return fileExists(dir, "slow-started") })
	res := r.Call(t.Context(), Request{Tool: "h.echo", Args: map[string]any{"message": "x"}, Caller: Caller{Role: "agent"}})
	if res.Status != StatusLimitExceeded || !errors.Is(res.Err, ErrLimitExceeded) {
		t.Errorf("second call with the only slot taken: got %s (%v), want limit_exceeded at its timeout", res.Status, res.Err)
	}
	if res := <-done; res.Err != nil {
		t.Errorf("slow call: %v", res.Err)
	}
}

// counterValue returns a counter's value or a histogram's sample count.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			if m.GetHistogram() != nil {
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// TestObserveCountsEveryCall: the kept series and the looked-up ones count
// alike, per status; made-up tool names are counted but not kept.
func TestObserveCountsEveryCall(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.observe("s", "t", StatusError, time.Millisecond, true)
	for range 3 {
		m.observe("s", "t", StatusSuccess, time.Millisecond, true)
	}
	m.observe("s", "t", StatusTimeout, time.Second, true)
	m.observe("s", "nope", StatusError, 0, false)
	for _, c := range []struct {
		name, tool, status string
		want               float64
	}{
		{"relay_tool_invocations_total", "t", "success", 3},
		{"relay_tool_invocations_total", "t", "error", 1},
		{"relay_tool_invocations_total", "t", "timeout", 1},
		{"relay_tool_invocations_total", "nope", "error", 1},
		{"relay_tool_call_seconds", "t", "", 5},
		{"relay_tool_call_seconds", "nope", "", 1},
	} {
		labels := map[string]string{"server": "s", "tool": c.tool}
		if c.status != "" {
			labels["status"] = c.status
		}
		if got := counterValue(t, reg, c.name, labels); got != c.want {
			t.Errorf("%s %v: got %v, want %v", c.name, labels, got, c.want)
		}
	}
	if _, kept := m.calls[seriesKey{"s", "nope"}]; kept || len(m.calls) != 1 {
		t.Errorf("kept series: got %v, want only s.t", m.calls)
	}
}

// A call that runs out of time names its limit and where that limit is set:
// the tool's or the server's policy budget, the server's "timeout" in
// mcp.json, else the default.
func TestTimeoutNamesItsSource(t *testing.T) {
	t.Parallel()
	h := helperServer(t, "h", t.TempDir())
	h.Timeout = time.Second
	cfg := fastConfig(t, h)
	cfg.Policy = policy(t, allowAll+"budgets:\n  h.slow: {timeout: 1s}\n")
	r := startRunner(t, cfg)
	tests := []struct {
		name, tool, want string
	}{
		{"tool budget", "h.slow", "the call's 1s limit passed (the timeout of policy budget h.slow)"},
		{"server entry", "h.slow-read", `the call's 1s limit passed (the "timeout" of server h in mcp.json)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := r.Call(t.Context(), Request{Tool: tt.tool, Args: map[string]any{"ms": 3000}, Caller: Caller{Role: "agent"}})
			if res.Status != StatusTimeout || !strings.Contains(res.Err.Error(), tt.want) {
				t.Errorf("got %s (%v), want timeout naming %q", res.Status, res.Err, tt.want)
			}
		})
	}
}

// A call to a server that is offline waits for it to come back (within the
// retry window) also when the server's tool list is not cached, as after an
// mcp.json reload or once the list's TTL has passed.
func TestCallWaitsForOfflineServerWithoutToolList(t *testing.T) {
	t.Parallel()
	h := helperServer(t, "h", t.TempDir())
	cfg := fastConfig(t, h)
	cfg.HealthBackoff = []time.Duration{500 * time.Millisecond}
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	pid := r.conns["h"].pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the server to be offline", func() bool { return r.Servers()[0].State == StateOffline })
	r.Reload([]mcpconfig.Server{h}) // unchanged: the server keeps its state, its tool list is dropped
	res := r.Call(t.Context(), Request{Tool: "h.echo", Args: map[string]any{"message": "back"}, Caller: Caller{Role: "agent"}})
	if res.Err != nil || res.Text != "Echo: back" {
		t.Fatalf("call while the server restarts: got %q, %v (%s); want the echo once it is back", res.Text, res.Err, res.Status)
	}
}
