package toolstest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// InputRequired is a 2026-07-28-only, stateless go-sdk MCP server over
// streamable HTTP whose tool "release" (not read-only: it has an effect)
// asks its questions as an InputRequiredResult (SEP-2322): "questions"
// elicitations (default 1) and a roots request, with a request state. The
// call sent again with the answers and that state releases once (Effects)
// and says what it got: "released state=<state> q0=<action>:<env> …
// roots=<n>". Safe for concurrent use.
type InputRequired struct {
	URL string
	// Calls counts the tools/call requests, Effects the releases.
	Calls, Effects atomic.Int32

	mu     sync.Mutex
	states map[string]bool // request states handed out and not yet used
}

type releaseIn struct {
	Questions int `json:"questions,omitempty"`
}

// StartInputRequired starts the server; it stops when the test ends.
func StartInputRequired(tb testing.TB) *InputRequired {
	tb.Helper()
	ir := &InputRequired{states: map[string]bool{}}
	s := mcp.NewServer(&mcp.Implementation{Name: "deploy", Version: "1.0.0"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2026-07-28"}})
	mcp.AddTool(s, &mcp.Tool{Name: "release", Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true)}}, ir.release)
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	tb.Cleanup(srv.Close)
	ir.URL = srv.URL
	return ir
}

func (ir *InputRequired) release(_ context.Context, req *mcp.CallToolRequest, in releaseIn) (*mcp.CallToolResult, any, error) {
	n := ir.Calls.Add(1)
	p := req.Params
	if len(p.InputResponses) == 0 {
		reqs := mcp.InputRequestMap{"roots": &mcp.ListRootsParams{}}
		for i := range max(in.Questions, 1) {
			reqs[fmt.Sprintf("q%d", i)] = &mcp.ElicitParams{Message: fmt.Sprintf("Where to release (question %d)?", i),
				RequestedSchema: map[string]any{"type": "object", "required": []any{"env"},
					"properties": map[string]any{"env": map[string]any{"type": "string", "enum": []any{"staging", "production"}}}}}
		}
		state := fmt.Sprintf("state-%d", n)
		ir.mu.Lock()
		ir.states[state] = true
		ir.mu.Unlock()
		return &mcp.CallToolResult{InputRequests: reqs, RequestState: state}, nil, nil
	}
	ir.mu.Lock()
	known := ir.states[p.RequestState]
	delete(ir.states, p.RequestState)
	ir.mu.Unlock()
	if !known {
		return nil, nil, fmt.Errorf("request state %q was never handed out or was used already", p.RequestState)
	}
	ir.Effects.Add(1)
	out := []string{"released", "state=" + p.RequestState}
	for _, k := range slices.Sorted(maps.Keys(p.InputResponses)) {
		switch r := p.InputResponses[k].(type) {
		case *mcp.ElicitResult:
			env, _ := r.Content["env"].(string)
			note, _ := json.Marshal(r.Meta["relay/note"])
			out = append(out, fmt.Sprintf("%s=%s:%s", k, r.Action, env))
			if r.Meta["relay/note"] != nil {
				out = append(out, k+".note="+string(note))
			}
		case *mcp.ListRootsResult:
			out = append(out, fmt.Sprintf("roots=%d", len(r.Roots)))
		default:
			return nil, nil, fmt.Errorf("answer %s of type %T", k, r)
		}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(out, " ")}}}, nil, nil
}
