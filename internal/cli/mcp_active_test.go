package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/toolstest"
)

// cliIn returns a function running one relay command in env.
func cliIn(t *testing.T, env map[string]string) func(args ...string) (int, string, string) {
	return func(args ...string) (int, string, string) {
		var out, errb syncBuffer
		code := Run(t.Context(), args, config.FromMap(env), &out, &errb)
		return code, out.String(), errb.String()
	}
}

// waitActive waits for `relay mcp active -json` (run by cli) to list one
// execution, and returns it.
func waitActive(t *testing.T, cli func(args ...string) (int, string, string)) activeExecution {
	t.Helper()
	var listed struct{ Executions []activeExecution }
	testenv.WaitFor(t, 30*time.Second, "mcp active to list the call", func() bool {
		code, out, errs := cli("mcp", "active", "-json")
		if code != 0 {
			t.Fatalf("mcp active: exit %d, %s", code, errs)
		}
		listed.Executions = nil
		if err := json.Unmarshal([]byte(out), &listed); err != nil {
			t.Fatalf("mcp active -json: %v: %q", err, out)
		}
		return len(listed.Executions) == 1
	})
	return listed.Executions[0]
}

// TestMCPCallStopSwitchAndStandalone: with a NATS server reachable, `relay
// mcp call` and `relay mcp test` obey the shared stop switch (exit 1, a
// message naming it, an audit record) and count in the shared daily quota;
// without one they run standalone and say on stderr what they could not check.
func TestMCPCallStopSwitchAndStandalone(t *testing.T) {
	t.Parallel()
	env, _ := tokenServer(t)
	env["RELAY_MCP_CONFIG"] = everythingConfig(t, "mcp.json")
	env["RELAY_AUDIT_LOG"] = filepath.Join(t.TempDir(), "audit.jsonl")
	env["RELAY_POLICY"] = writeTemp(t, "policy.yaml", "budgets:\n  everything.echo: {daily_quota: 1}\n")
	cli := cliIn(t, env)
	echo := []string{"mcp", "call", "everything", "echo", "--args", `{"message": "hi"}`}
	if code, out, errs := cli("mcp", "stop"); code != 0 {
		t.Fatalf("stop: exit %d, %s %s", code, out, errs)
	}
	code, out, errs := cli(echo...)
	if code != 1 || !strings.Contains(errs, tools.ErrStopped.Error()) || !strings.Contains(errs, "status disabled") || !strings.Contains(errs, "relay mcp resume") || out != "" {
		t.Errorf("call with the stop switch on: exit %d, stdout %q, stderr %q; want exit 1 naming the stop switch", code, out, errs)
	}
	if code, _, errs := cli("mcp", "test", "everything"); code != 1 || !strings.Contains(errs, "stop switch is ON") {
		t.Errorf("test with the stop switch on: exit %d, stderr %q; want exit 1 naming the stop switch", code, errs)
	}
	if code, out, errs := cli("mcp", "resume"); code != 0 {
		t.Fatalf("resume: exit %d, %s %s", code, out, errs)
	}
	code, out, errs = cli(echo...)
	if code != 0 || !strings.Contains(out, "hi") || strings.Contains(errs, "standalone") {
		t.Errorf("call after resume: exit %d, stdout %q, stderr %q; want the echo, no standalone warning", code, out, errs)
	}
	code, _, errs = cli(echo...)
	if code != 1 || !strings.Contains(errs, "status rate_limited") || !strings.Contains(errs, "budget everything.echo allows 1 calls a day") {
		t.Errorf("second call on a quota of 1: exit %d, stderr %q; want exit 1, rate_limited by the shared quota", code, errs)
	}
	recs := toolstest.AuditRecords(t, env["RELAY_AUDIT_LOG"])
	if len(recs) != 3 || recs[0].Status != tools.StatusDisabled || recs[1].Status != tools.StatusSuccess || recs[2].Status != tools.StatusRateLimited {
		t.Fatalf("audit: got %+v, want the calls refused by the stop switch, run, refused by the quota", recs)
	}
	for _, r := range recs {
		if r.AgentID != "cli" || r.RunID == "" || r.RunID == r.ExecutionID || !strings.HasPrefix(r.Actor, "cli:") || r.Role != "operator" {
			t.Errorf("CLI audit record %+v: want agent cli, a run id of its own, actor cli:<user>", r)
		}
	}

	// No NATS server: the call runs, and says what it could not check.
	env["NATS_URL"] = "nats://127.0.0.1:" + strings.Split(freeAddr(t), ":")[1]
	start := time.Now()
	code, out, errs = cli(echo...)
	if code != 0 || !strings.Contains(out, "hi") || !strings.Contains(errs, "running standalone: the stop switch and the shared limits") {
		t.Errorf("call without NATS: exit %d, stdout %q, stderr %q; want the echo and the standalone warning", code, out, errs)
	}
	t.Logf("call without NATS took %s", time.Since(start))
}

// TestMCPActiveAndCancel: a long-running tool call in a running relay is
// listed by `relay mcp active -json` and cancelled by `relay mcp cancel`:
// the result is cancelled and the audit record names who cancelled.
func TestMCPActiveAndCancel(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	env["RELAY_MCP_CONFIG"] = everythingConfig(t, "mcp.json")
	env["RELAY_AUDIT_LOG"] = filepath.Join(t.TempDir(), "audit.jsonl")
	env["RELAY_POLICY"] = writeTemp(t, "policy.yaml", "roles:\n  - role: agent\n    capabilities: ['everything.*']\n")
	serveReady(t, env, nil, 60*time.Second)
	b, err := bus.Connect(t.Context(), bus.Config{URL: "nats://" + env["RELAY_NATS_LISTEN"], Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// /readyz waits for the first connect attempt only; on a loaded machine
	// it may have failed, and the runner reconnects: wait for the server.
	testenv.WaitFor(t, 60*time.Second, "everything ready in the running relay", func() bool {
		st, err := tools.StatusRemote(t.Context(), b.Conn(), b.Prefix())
		return err == nil && len(st.Servers) == 1 && st.Servers[0].State == tools.StateReady
	})
	failed := make(chan *envelope.Envelope, 1)
	sub, err := b.Conn().Subscribe(b.Subject(envelope.SubjectToolFailed), func(m *nats.Msg) {
		if e, err := envelope.Parse(m.Data); err == nil {
			failed <- e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	call := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, "run the long operation")
	call.ToolCall = &envelope.ToolCall{Name: "everything.trigger-long-running-operation", Args: map[string]any{"duration": 25, "steps": 5}}
	call.Meta.Thread = "slack:T1/C1/1.0"
	call.Meta.Set("agent", map[string]any{"id": "agent-1", "role": "agent"})
	if _, err := b.Publish(t.Context(), envelope.SubjectToolCall, call); err != nil {
		t.Fatal(err)
	}
	cli := cliIn(t, env)
	if e := waitActive(t, cli); e.ID != call.ID || e.Server != "everything" || e.Tool != "trigger-long-running-operation" ||
		e.Thread != call.Meta.Thread || e.Actor != "agent-1" || e.Started.IsZero() || e.ElapsedMS < 0 {
		t.Errorf("active: got %+v, want the call", e)
	}
	if code, out, errs := cli("mcp", "cancel", call.ID, "--actor", "U0ALICE"); code != 0 || !strings.HasPrefix(out, "cancelled "+call.ID) {
		t.Fatalf("mcp cancel: exit %d, %q, %s", code, out, errs)
	}
	select {
	case res := <-failed:
		if st, _ := res.ToolCall.Result["status"].(string); st != string(tools.StatusCancelled) || res.ToolCall.Result["cancelled_by"] != "U0ALICE" {
			t.Errorf("result: got status %q (%v), want cancelled by U0ALICE", st, res.ToolCall.Result)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no tool.failed result after the cancel")
	}
	// The runner writes its audit lines in batches: the record is in the
	// file within tools.AuditFlushDelay of the result.
	var recs []tools.Record
	testenv.WaitFor(t, 10*time.Second, "the audit record in the file", func() bool {
		recs = toolstest.AuditRecords(t, env["RELAY_AUDIT_LOG"])
		return len(recs) > 0
	})
	if len(recs) != 1 || recs[0].Status != tools.StatusCancelled || recs[0].CancelledBy != "U0ALICE" || recs[0].ExecutionID != call.ID {
		t.Errorf("audit: got %+v, want one cancelled record naming U0ALICE", recs)
	}
	if code, _, errs := cli("mcp", "cancel", call.ID); code != 1 || !strings.Contains(errs, "no active execution") {
		t.Errorf("second cancel: exit %d, stderr %q; want exit 1, not active", code, errs)
	}
}

// TestMCPCallAuditOnTheBus: with a NATS server reachable, a `relay mcp call`
// publishes its audit record on audit.tool as the tool runner does, so an
// operator's call is in the relay's audit stream, not only in a local file.
func TestMCPCallAuditOnTheBus(t *testing.T) {
	t.Parallel()
	env, _ := tokenServer(t)
	env["RELAY_MCP_CONFIG"] = everythingConfig(t, "mcp.json")
	env["RELAY_AUDIT_LOG"] = filepath.Join(t.TempDir(), "audit.jsonl")
	nc, err := nats.Connect(env["NATS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	got := make(chan *envelope.Envelope, 4)
	sub, err := nc.Subscribe("relay."+toolrunner.SubjectAudit, func(m *nats.Msg) {
		if e, err := envelope.Parse(m.Data); err == nil {
			got <- e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cli := cliIn(t, env)
	if code, out, errs := cli("mcp", "call", "everything", "echo", "--args", `{"message": "hi"}`); code != 0 {
		t.Fatalf("call: exit %d, %s %s", code, out, errs)
	}
	recs := toolstest.AuditRecords(t, env["RELAY_AUDIT_LOG"])
	if len(recs) != 1 {
		t.Fatalf("audit file: got %d records, want 1", len(recs))
	}
	select {
	case e := <-got:
		var r tools.Record
		if ok, err := e.Meta.Decode("audit", &r); !ok || err != nil {
			t.Fatalf("meta.audit: %v, %v", ok, err)
		}
		if r.ID != recs[0].ID || r.AgentID != "cli" || r.Role != "operator" || r.Status != tools.StatusSuccess {
			t.Errorf("audit.tool: got %+v, want the file's record %+v", r, recs[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no audit record on audit.tool")
	}
}

// TestMCPCancelOfACallNamesItsProcess: `relay mcp cancel` of an execution
// that a `relay mcp call` process runs says so, and how to stop it, whether
// or not a tool runner answers the cancel.
func TestMCPCancelOfACallNamesItsProcess(t *testing.T) {
	t.Parallel()
	env, _ := tokenServer(t)
	env["RELAY_MCP_CONFIG"] = everythingConfig(t, "mcp.json")
	env["RELAY_AUDIT_LOG"] = filepath.Join(t.TempDir(), "audit.jsonl")
	cli := cliIn(t, env)
	ctx, cancel := context.WithCancel(t.Context())
	called := make(chan int, 1)
	go func() {
		called <- Run(ctx, []string{"mcp", "call", "everything", "trigger-long-running-operation", "--args", `{"duration": 60, "steps": 2}`},
			config.FromMap(env), &syncBuffer{}, &syncBuffer{})
	}()
	defer func() { cancel(); <-called }()
	id := waitActive(t, cli).ID
	want := fmt.Sprintf("runs in relay mcp call (pid %d on ", os.Getpid())
	check := func(when string) {
		t.Helper()
		code, _, errs := cli("mcp", "cancel", id)
		if code != 1 || !strings.Contains(errs, want) || !strings.Contains(errs, "interrupt that process") || strings.Contains(errs, "does not answer") {
			t.Errorf("cancel %s: exit %d, stderr %q; want exit 1, %q and how to stop it", when, code, errs, want)
		}
	}
	check("without a tool runner")
	stopRunner := runRelay(t, env, []string{"toolrunner"}, nil)
	defer stopRunner()
	testenv.WaitFor(t, 30*time.Second, "the tool runner to answer", func() bool {
		code, _, _ := cli("mcp", "refresh")
		return code == 0
	})
	check("through a tool runner")
}
