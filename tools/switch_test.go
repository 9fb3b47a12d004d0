package tools

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// stubbornServer is a go-sdk server whose tool "ask" asks the client a
// question and waits for the answer however its call ends (until the test
// ends): a server that never lets a session close while it waits.
func stubbornServer(t *testing.T, name string) mcpconfig.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, nil)
	schema := map[string]any{
		"type":       "object",
		"properties": map[string]any{"reason": map[string]any{"type": "string"}},
		"required":   []any{"reason"},
	}
	life, endLife := context.WithCancel(context.Background())
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(life, &mcp.ElicitParams{Message: "Why?", RequestedSchema: schema})
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	t.Cleanup(endLife) // before srv.Close: cleanups run last first
	return mcpconfig.Server{Name: name, Type: mcpconfig.HTTP, URL: srv.URL, ProtocolVersion: mcpconfig.DefaultProtocolVersion}
}

// A server whose question waits in Slack must not hold the switches: the
// state watcher applies a disable and the stop switch at once, the pending
// question is cancelled (the server gets "cancel", the Elicitor sees why)
// and the stop switch refuses a call on another server.
func TestDisableDuringQuestionNeverHoldsTheSwitches(t *testing.T) {
	t.Parallel()
	asked := make(chan *Question, 1)
	causes := make(chan error, 1)
	cfg := fastConfig(t, stubbornServer(t, "ask"), stubbornServer(t, "other"))
	state := NewMemoryState()
	cfg.State = state
	// Long enough that a watcher waiting for the question misses every
	// bound below.
	cfg.ElicitTimeout = 30 * time.Second
	cfg.Elicitor = ElicitorFunc(func(ctx context.Context, q *Question) (*Answer, error) {
		asked <- q
		<-ctx.Done() // nobody answers
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan State, 64)
	r.applied = func(s State) {
		select {
		case applied <- s:
		default:
		}
	}
	// until waits for the watch to apply a state meeting ok within bound.
	until := func(bound <-chan struct{}, ok func(State) bool) bool {
		for {
			select {
			case s := <-applied:
				if ok(s) {
					return true
				}
			case <-bound:
				return false
			}
		}
	}
	t.Cleanup(func() { _ = r.Close() })
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if pending := r.WaitReady(ctx); len(pending) > 0 {
		t.Fatalf("servers not ready: %v", pending)
	}

	done := make(chan *Result, 1)
	go func() {
		done <- r.Call(t.Context(), Request{Tool: "ask.ask", Operator: true, Thread: "slack:T1/C1/1.2", ActsFor: "U9"})
	}()
	select {
	case <-asked:
	case <-ctx.Done():
		t.Fatal("the server's question never reached the Elicitor")
	}

	if err := state.SetServer(ctx, "ask", ServerState{Disabled: true, Reason: "misbehaves", By: "operator", At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := state.SetStop(ctx, true); err != nil {
		t.Fatal(err)
	}
	second, cancelSecond := context.WithTimeout(ctx, time.Second)
	defer cancelSecond()
	if !until(second.Done(), func(s State) bool { return s.Stop }) {
		t.Fatal("the stop switch was not applied within a second of a disable while a question is pending")
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, ErrDisabled) {
			t.Errorf("question ended by %v, want the disable (ErrDisabled)", cause)
		}
	case <-second.Done():
		t.Fatal("the pending question was not cancelled within a second of the disable")
	}
	if res := r.Call(ctx, Request{Tool: "other.echo", Operator: true}); !errors.Is(res.Err, ErrStopped) {
		t.Errorf("call on another server while stopped: got %q, %v; want ErrStopped", res.Text, res.Err)
	}
	// The call on the disabled server ends cancelled by the disable (the
	// SDK's last call on a closing session may wait for the session to
	// close: a stubborn server delays it, never the switches).
	select {
	case res := <-done:
		// Either the server had the question's "cancel" first and said
		// so, or the disable cancelled the call.
		cancelled := errors.Is(res.Err, ErrCancelled) && strings.Contains(res.CancelledBy, "disable of ask")
		if !cancelled && (res.Err != nil || res.Text != "cancel") {
			t.Errorf("the call on the disabled server: got %q, %v (cancelled by %q); want the server's cancel or cancelled by the disable", res.Text, res.Err, res.CancelledBy)
		}
	case <-ctx.Done():
		t.Fatal("the call on the disabled server never ended")
	}
	if st := r.Servers()[0]; st.State != StateDisabled || st.DisabledReason != "misbehaves" {
		t.Errorf("ask: state %s (%q), want disabled (misbehaves)", st.State, st.DisabledReason)
	}

	// And back: resume and enable take effect as well.
	if err := state.SetStop(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := state.SetServer(ctx, "ask", ServerState{By: "operator", At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if !until(ctx.Done(), func(s State) bool { return !s.Stop && !s.Servers["ask"].Disabled }) {
		t.Fatal("resume and enable never applied")
	}
	if pending := r.WaitReady(ctx); len(pending) > 0 {
		t.Fatalf("not ready again after enable: %v", pending)
	}
	if res := r.Call(ctx, Request{Tool: "ask.echo", Operator: true}); res.Err != nil || res.Text != "ran" {
		t.Errorf("call after resume and enable: got %q, %v; want ran", res.Text, res.Err)
	}
}
