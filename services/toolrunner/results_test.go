package toolrunner

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

// TestLargeResultIsStoredWhole: a real MCP server (go-sdk, streamable HTTP)
// answers with 2 MB of text, more than the NATS server's max payload (1 MB
// on the machine's server). The result still reaches tool.result with
// status success, its text cut with a note naming the object store, and the
// whole reply is read back from the object store.
// bigResult runs a tool runner on the machine's NATS server (max payload 1
// MB) with a real MCP server (go-sdk, streamable HTTP) whose tool big.dump
// answers 2 MB of text; mod, when set, changes the service before it runs.
// It returns the bus, the text and observers of tool.result and tool.failed.
func bigResult(t *testing.T, mod func(*Service)) (b *bus.Bus, big string, results, failed <-chan *envelope.Envelope) {
	t.Helper()
	big = strings.Repeat("0123456789abcdé\n", 2<<20/17) // multi-byte characters: the cut must not split one
	srv := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "dump", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, msgIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: big}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)

	b = bustest.External(t)
	if mp := b.Conn().MaxPayload(); int64(len(big)) <= mp {
		t.Fatalf("the NATS server's max payload is %d bytes; the test needs one below the result's %d", mp, len(big))
	}
	pol := toolstest.Policy(t, "roles:\n  - role: agent\n    capabilities: ['big.*']\n")
	svc, err := New(t.Context(), Config{Logger: testenv.Logger(t, slog.LevelError), Tools: tools.Config{
		Servers: []mcpconfig.Server{{Name: "big", Type: mcpconfig.HTTP, URL: hs.URL, ProtocolVersion: mcpconfig.DefaultProtocolVersion}},
		Policy:  pol, AuditPath: filepath.Join(t.TempDir(), "tools.jsonl"),
	}}, b)
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(svc)
	}
	testenv.Go(t, "Run", svc.Run)
	testenv.WaitFor(t, 20*time.Second, "big ready", func() bool { return svc.Runner().Servers()[0].State == tools.StateReady })
	results = bustest.Observe(t, b, "obs-result", envelope.SubjectToolResult)
	failed = bustest.Observe(t, b, "obs-failed", envelope.SubjectToolFailed)
	call := toolCall("big.dump", "agent", map[string]any{"message": "all"})
	if _, err := b.Publish(t.Context(), envelope.SubjectToolCall, call); err != nil {
		t.Fatal(err)
	}
	return b, big, results, failed
}

func TestLargeResultIsStoredWhole(t *testing.T) {
	t.Parallel()
	b, big, results, failed := bigResult(t, nil)
	var got *envelope.Envelope
	select {
	case got = <-results:
	case f := <-failed:
		t.Fatalf("got a failure: %s %v, want the result", f.Content, f.ToolCall.Result)
	case <-time.After(60 * time.Second):
		t.Fatal("no result within 60s")
	}
	res := got.ToolCall.Result
	if res["status"] != "success" || res["cut"] != true || !strings.Contains(got.Content, "the tool ran") ||
		!strings.Contains(got.Content, ResultBucket(b.Prefix())) || !strings.HasPrefix(big, strings.SplitN(got.Content, "\n\n[relay:", 2)[0]) {
		t.Fatalf("result: status %v cut %v, content of %d bytes ending %q; want success, cut, a note naming %s and the start of the text",
			res["status"], res["cut"], len(got.Content), got.Content[max(0, len(got.Content)-300):], ResultBucket(b.Prefix()))
	}
	whole, err := tools.FetchResult(t.Context(), b.JetStream(), b.Prefix(), got)
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := whole.ToolCall.Result["text"].(string); text != big || whole.ToolCall.Result["status"] != "success" {
		t.Errorf("stored reply: text of %d bytes (status %v), want the whole %d bytes", len(text), whole.ToolCall.Result["status"], len(big))
	}
}

// TestLargeResultIsCutWhenNotStored: where the object store cannot take the
// reply, the result is cut with a note saying the rest is lost, still with
// status success (the call ran), and names no object.
func TestLargeResultIsCutWhenNotStored(t *testing.T) {
	t.Parallel()
	_, big, results, failed := bigResult(t, func(s *Service) { s.results = nil })
	var got *envelope.Envelope
	select {
	case got = <-results:
	case f := <-failed:
		t.Fatalf("got a failure: %s %v, want the result", f.Content, f.ToolCall.Result)
	case <-time.After(60 * time.Second):
		t.Fatal("no result within 60s")
	}
	if _, named := got.Meta.Get(tools.MetaResultObject); named || got.ToolCall.Result["status"] != "success" ||
		!strings.Contains(got.Content, "could not be stored") || !strings.Contains(got.Content, "the rest is lost") ||
		!strings.HasPrefix(big, strings.SplitN(got.Content, "\n\n[relay:", 2)[0]) {
		t.Fatalf("result: status %v, object named %v, content ending %q; want success, no object, the start and a note that the rest is lost",
			got.ToolCall.Result["status"], named, got.Content[max(0, len(got.Content)-300):])
	}
}
