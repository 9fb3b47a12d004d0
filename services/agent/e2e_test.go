package agent

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// TestWithRealToolRunner runs the loop against the real tool runner and the
// real mcp-server-everything (stdio): the role's tools are listed over
// rpc.tool.list, the call crosses tool.call and the result comes back on
// tool.result.
func TestWithRealToolRunner(t *testing.T) {
	t.Parallel()
	bin := testenv.NPMBin(t, "mcp-server-everything")
	b := bustest.Embedded(t)
	pol, err := mcpconfig.ParsePolicy([]byte("roles:\n  - role: agent\n    capabilities: ['everything.echo']\n"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := toolrunner.New(t.Context(), toolrunner.Config{Logger: testenv.Logger(t, slog.LevelWarn), Tools: tools.Config{
		Servers: []mcpconfig.Server{{Name: "everything", Type: mcpconfig.Stdio, Command: bin, Args: []string{"stdio"},
			ProtocolVersion: mcpconfig.DefaultProtocolVersion}},
		Policy: pol, AuditPath: filepath.Join(t.TempDir(), "tools.jsonl"),
	}}, b)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Go(t, "toolrunner Run", tr.Run)
	testenv.WaitFor(t, 30*time.Second, "mcp-server-everything ready", func() bool {
		s := tr.Runner().Servers()
		return len(s) == 1 && s[0].State == tools.StateReady
	})

	h := setup(t, []reply{callTool("everything__echo", map[string]any{"message": "hi"}), say("It echoed.")}, withBus(b))
	h.publish(t, "in.github.issues", githubIssueOpened())
	if s := h.next(t); s.Content != "It echoed." {
		t.Fatalf("got %q, want the answer", s.Content)
	}
	reqs := h.llm.requests()
	if got := reqs[0].ToolNames(); len(got) != 2 || got[1] != "everything__echo" {
		t.Errorf("got offered tools %v, want retrieve_docs and everything__echo only (the role's capability)", got)
	}
	if got := reqs[1].LastTool(); got != "Echo: hi" {
		t.Errorf("got tool output %q, want Echo: hi", got)
	}
}
