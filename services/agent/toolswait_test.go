package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

// The first listing after a start waits for the tool runner's first
// discovery: a stdio server still in its handshake is not left out.
func TestBusToolsWaitsForFirstDiscovery(t *testing.T) {
	t.Parallel()
	bin := testenv.NPMBin(t, "mcp-server-everything")
	b := bustest.Embedded(t)
	pol := toolstest.Policy(t, "roles:\n  - role: agent\n    capabilities: ['*.*']\n")
	r, err := tools.New(tools.Config{Policy: pol, Servers: []mcpconfig.Server{{
		Name: "everything", Type: mcpconfig.Stdio, Command: bin, Args: []string{"stdio"}, ProtocolVersion: mcpconfig.DefaultProtocolVersion,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	stop, err := tools.Serve(t.Context(), b.Conn(), b.Prefix(), r, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	lister := BusTools(b.Conn(), b.Prefix(), 0).SetWait(30 * time.Second)
	list, err := lister.Tools(t.Context(), "agent", mcpconfig.Location{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(list, func(ti tools.ToolInfo) bool { return ti.Name == "everything.echo" }) {
		t.Fatalf("got %d tools, want everything.echo among them (the list was taken before the handshake finished)", len(list))
	}
}

// A tool list the agent caches is dropped when the tool runners announce a
// change on rpc.tool.refresh (an mcp.json reload that changed the servers,
// `relay mcp refresh`): the next task is offered the new tools.
func TestCachedToolsDroppedOnRefresh(t *testing.T) {
	t.Parallel()
	fr := &fakeRunner{}
	h := setup(t, []reply{say("first"), say("second")}, withRunner(fr), withToolsTTL(time.Hour))
	h.publish(t, "in.slack.app_mention", slackMention(false, false))
	h.next(t)
	search := tools.ToolInfo{Name: "acme__search.query", Server: "acme__search", Tool: "query",
		InputSchema: map[string]any{"type": "object"}}
	fr.mu.Lock()
	fr.tools = []tools.ToolInfo{echoTool, search}
	fr.mu.Unlock()
	if err := tools.AnnounceRefresh(h.b.Conn(), h.b.Prefix()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the agent to drop its tool lists", func() bool {
		h.tools.mu.Lock()
		defer h.tools.mu.Unlock()
		return len(h.tools.cache) == 0
	})
	h.publish(t, "in.github.issues", githubIssueOpened())
	h.next(t)
	reqs := h.llm.requests()
	if len(reqs) != 2 || !slices.Contains(reqs[1].ToolNames(), "acme__search__query") {
		t.Errorf("second task offered %v, want acme__search__query among them", reqs[len(reqs)-1].ToolNames())
	}
}
