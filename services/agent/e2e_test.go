package agent

import (
	"testing"

	"github.com/relaystation/relay/bus/bustest"
)

// TestWithRealToolRunner runs the loop against the real tool runner and the
// real mcp-server-everything (stdio): the role's tools are listed over
// rpc.tool.list, the call crosses tool.call and the result comes back on
// tool.result.
func TestWithRealToolRunner(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	startToolRunner(t, b, "roles:\n  - role: agent\n    capabilities: ['everything.echo']\n", "everything")

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
