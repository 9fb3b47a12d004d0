package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// mrtrServer is a 2026-07-28-only, stateless go-sdk server whose tool "ask"
// returns an InputRequiredResult (SEP-2322) with an elicitation and a roots
// request and its request state, and on the retry answers with what it got.
func mrtrServer(t *testing.T, g *verServer) mcpconfig.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mrtr", Version: "1.0.0"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2026-07-28"}})
	type askIn struct {
		Who string `json:"who"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, func(_ context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
		if len(req.Params.InputResponses) == 0 {
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{
					"reason": &mcp.ElicitParams{Message: "Why, " + in.Who + "?", RequestedSchema: map[string]any{
						"type": "object", "properties": map[string]any{"reason": map[string]any{"type": "string"}}, "required": []any{"reason"}}},
					"roots": &mcp.ListRootsParams{},
				},
				RequestState: "state-of-" + in.Who,
			}, nil, nil
		}
		el, _ := req.Params.InputResponses["reason"].(*mcp.ElicitResult)
		roots, _ := req.Params.InputResponses["roots"].(*mcp.ListRootsResult)
		if el == nil || roots == nil {
			return nil, nil, fmt.Errorf("missing answers: %#v", req.Params.InputResponses)
		}
		b, _ := json.Marshal(el.Content)
		return textResult(fmt.Sprintf("%s %s %s roots=%d", req.Params.RequestState, el.Action, b, len(roots.Roots))), nil, nil
	})
	return mcpconfig.Server{Name: "mrtr", Type: mcpconfig.HTTP, URL: g.serve(t, s, true)}
}

// TestInputRequiredAsksTheCallsHuman: a 2026-07-28 server's input-required
// elicitation goes to the person of the call through the Elicitor, as a
// server-initiated elicitation does, and the call is re-issued with the
// answer and the request state; roots are answered empty. Calls of
// different threads in flight at once each reach their own person (the
// question travels with its call, unlike a server-initiated one).
func TestInputRequiredAsksTheCallsHuman(t *testing.T) {
	t.Parallel()
	var questions recorder[*Question]
	cfg := fastConfig(t, mrtrServer(t, &verServer{}))
	cfg.Elicitor = ElicitorFunc(func(_ context.Context, q *Question) (*Answer, error) {
		questions.add(q)
		return &Answer{Action: ElicitAccept, Content: map[string]any{"reason": "asked in " + q.Thread}, By: "U1"}, nil
	})
	r := startRunner(t, cfg)
	if v := r.Servers()[0].ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("protocol %q", v)
	}
	var wg sync.WaitGroup
	for _, who := range []string{"a", "b", "c"} {
		wg.Go(func() {
			thread := "slack:T1/C1/" + who
			res := r.Call(t.Context(), Request{Tool: "mrtr.ask", Args: map[string]any{"who": who}, Operator: true,
				CallID: "call-" + who, TaskID: "task-" + who, Thread: thread, ActsFor: "U" + who})
			want := fmt.Sprintf(`state-of-%s accept {"reason":"asked in %s"} roots=0`, who, thread)
			if res.Err != nil || res.Text != want {
				t.Errorf("%s: got %q, %v; want %q", who, res.Text, res.Err, want)
			}
		})
	}
	wg.Wait()
	asked := questions.all()
	if len(asked) != 3 {
		t.Fatalf("asked %d questions, want 3", len(asked))
	}
	for _, q := range asked {
		who := q.Thread[len(q.Thread)-1:]
		if q.Server != "mrtr" || q.Tool != "ask" || q.CallID != "call-"+who || q.ActsFor != "U"+who || q.Message != "Why, "+who+"?" {
			t.Errorf("question %+v is not its call's", q)
		}
	}
}

// TestStandardHeadersOnEveryRound: over HTTP at 2026-07-28 every tools/call
// carries the Mcp-Method and Mcp-Name headers (SEP-2243), the retry of an
// input-required round (which the runner sends itself) included.
func TestStandardHeadersOnEveryRound(t *testing.T) {
	t.Parallel()
	g := &verServer{}
	cfg := fastConfig(t, mrtrServer(t, g))
	cfg.Elicitor = ElicitorFunc(func(context.Context, *Question) (*Answer, error) {
		return &Answer{Action: ElicitAccept, Content: map[string]any{"reason": "ok"}}, nil
	})
	r := startRunner(t, cfg)
	res := r.Call(t.Context(), Request{Tool: "mrtr.ask", Args: map[string]any{"who": "h"}, Operator: true, CallID: "call-h", Thread: "slack:T1/C1/h"})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var calls []string
	for _, h := range g.headers {
		if strings.HasPrefix(h, "tools/call ") {
			calls = append(calls, h)
		}
	}
	want := "tools/call Mcp-Method=tools/call Mcp-Name=ask"
	if len(calls) != 2 || calls[0] != want || calls[1] != want {
		t.Errorf("tools/call requests %q, want two (the call and its retry) each with %q", calls, want)
	}
}
