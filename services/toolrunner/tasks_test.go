package toolrunner

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

// TestTaskSurvivesRestart: server-everything's simulate-research-query
// (an MCP task) is called through the bus; the tool runner stops while the
// task runs (its sessions closed, as on a rolling restart), a new tool runner
// takes the call's redelivery, polls the same task on the server (which
// outlives both runners, over streamable HTTP) and publishes one result.
func TestTaskSurvivesRestart(t *testing.T) {
	t.Parallel()
	url := "http://" + testenv.Everything(t, "streamableHttp") + "/mcp"
	b := bustest.Embedded(t)
	pol := toolstest.Policy(t, "roles:\n  - role: agent\n    capabilities: ['every.*']\n")
	server := mcpconfig.Server{Name: "every", Type: mcpconfig.HTTP, URL: url, ProtocolVersion: mcpconfig.DefaultProtocolVersion}
	newRunner := func(audit string) (*Service, func()) {
		svc, err := New(t.Context(), Config{Logger: testenv.Logger(t, slog.LevelWarn), AckWait: 3 * time.Second, ShutdownGrace: 50 * time.Millisecond,
			Tools: tools.Config{Servers: []mcpconfig.Server{server}, Policy: pol, AuditPath: audit}}, b)
		if err != nil {
			t.Fatal(err)
		}
		stop := testenv.Go(t, "Run", svc.Run)
		testenv.WaitFor(t, 20*time.Second, "every ready", func() bool { return svc.Runner().Servers()[0].State == tools.StateReady })
		return svc, stop
	}
	progress := bustest.Observe(t, b, "obs-progress", SubjectProgress)
	results := bustest.Observe(t, b, "obs-results", envelope.SubjectToolResult)
	failed := bustest.Observe(t, b, "obs-failed", envelope.SubjectToolFailed)

	auditA := filepath.Join(t.TempDir(), "a.jsonl")
	_, stopA := newRunner(auditA)
	call := toolCall("every.simulate-research-query", "agent", map[string]any{"topic": "relays"})
	if _, err := b.Publish(t.Context(), envelope.SubjectToolCall, call); err != nil {
		t.Fatal(err)
	}
	var taskID string
	for taskID == "" {
		p := testenv.Receive(t, progress, 30*time.Second, "the task's first status")
		var tp struct {
			Task    string `json:"mcp_task_id"`
			Message string `json:"message"`
		}
		if ok, err := p.Meta.Decode("tool_progress", &tp); !ok || err != nil || p.Meta.GetString("in_reply_to") != call.ID {
			t.Fatalf("progress envelope %+v (%v)", p.Meta, err)
		}
		if strings.Contains(tp.Message, "Gathering sources") {
			taskID = tp.Task
		}
	}
	stopA()
	if lines := strings.TrimSpace(string(testenv.ReadFile(t, auditA))); lines != "" {
		t.Fatalf("the stopped runner wrote audit records: %s", lines)
	}
	if _, err := b.Publish(t.Context(), "system.tool.marker", envelope.New(envelope.ChannelInternal, envelope.RoleSystem, "marker")); err != nil {
		t.Fatal(err)
	}

	auditB := filepath.Join(t.TempDir(), "b.jsonl")
	newRunner(auditB)
	got := testenv.Receive(t, results, 60*time.Second, "the call's result")
	if got.Meta.GetString("in_reply_to") != call.ID || !strings.Contains(got.Content, "# Research Report: relays") {
		t.Fatalf("got result %q of %s, want the report of %s", clipResult(got.Content), got.Meta.GetString("in_reply_to"), call.ID)
	}
	testenv.Quiet(t, results, 500*time.Millisecond, "a second result")
	testenv.Quiet(t, failed, 0, "a failure")
	audit := string(testenv.ReadFile(t, auditB))
	if n := strings.Count(audit, "\n"); n != 1 || !strings.Contains(audit, `"mcp_task_id":"`+taskID+`"`) {
		t.Fatalf("got audit %s, want one record of task %s", audit, taskID)
	}
	// Every status the second runner published is the same task's.
	for {
		select {
		case p := <-progress:
			var tp struct {
				Task string `json:"mcp_task_id"`
			}
			_, _ = p.Meta.Decode("tool_progress", &tp)
			if tp.Task != taskID {
				t.Fatalf("status of task %s, want %s only (the tool was called again)", tp.Task, taskID)
			}
		default:
			return
		}
	}
}

func clipResult(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}
