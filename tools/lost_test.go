package tools

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// A streamable-HTTP server lost in the middle of a call ends the call with
// "connection lost", naming the server and the cause, as soon as the
// transport reports it: not at the call's time limit.
func TestRemoteLostMidCallSaysConnectionLost(t *testing.T) {
	t.Parallel()
	// "before its answer" loses the POST before the server sent anything;
	// "while it streams" after the tool's progress opened the response stream.
	for _, streaming := range []bool{false, true} {
		name := map[bool]string{false: "before its answer", true: "while it streams"}[streaming]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			remoteLostMidCall(t, streaming)
		})
	}
}

func remoteLostMidCall(t *testing.T, streaming bool) {
	started := make(chan struct{}, 4)
	s := mcp.NewServer(&mcp.Implementation{Name: "hangs", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "hang"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		if streaming {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Message: "working"})
		}
		started <- struct{}{}
		<-ctx.Done()
		return nil, nil, ctx.Err()
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer hs.Close()
	cfg := fastConfig(t, mcpconfig.Server{Name: "remote", Type: mcpconfig.HTTP, URL: hs.URL, Timeout: time.Minute,
		ProtocolVersion: mcpconfig.DefaultProtocolVersion})
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan *Result, 1)
	req := Request{Tool: "remote.hang", Caller: Caller{Role: "agent"}}
	progressed := make(chan struct{}, 1)
	if streaming {
		req.Progress = func(ProgressEvent) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		}
	}
	go func() { done <- r.Call(ctx, req) }()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the tool never started")
	}
	if streaming {
		select {
		case <-progressed: // the response stream is open
		case <-ctx.Done():
			t.Fatal("no progress reached the caller")
		}
	}
	// The server process dies: its port refuses new connections and the
	// open ones break (httptest's Close would wait for the call instead).
	closed := time.Now()
	hs.Listener.Close()
	hs.CloseClientConnections()
	select {
	case res := <-done:
		if res.Err == nil || !strings.Contains(res.Err.Error(), "connection lost to server remote") {
			t.Fatalf("got %s, %v; want an error saying the connection to remote was lost", res.Status, res.Err)
		}
		t.Logf("error after %s: %v", time.Since(closed), res.Err)
	case <-ctx.Done():
		t.Fatal("the call did not end within 20s of the connection's loss (its limit is 1 minute)")
	}
}

// A stdio server that exits in the middle of a call: the call's error says
// the process exited and shows its last stderr lines, redacted.
func TestStdioExitMidCallShowsStderr(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	steer(t, dir, "die-tool", "1")
	cfg := fastConfig(t, helperServer(t, "h", dir))
	cfg.Policy = policy(t, allowAll)
	r := startRunner(t, cfg)
	res := r.Call(t.Context(), Request{Tool: "h.die", Caller: Caller{Role: "agent"}})
	if res.Err == nil {
		t.Fatalf("got %s, %q; want the call to fail", res.Status, res.Text)
	}
	msg := res.Err.Error()
	t.Logf("error: %s", msg)
	for _, want := range []string{"connection lost to server h", "the server process exited during the call", "helper: out of memory in worker 3"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "ghp_abcdefghijklmnopqrstuvwxyz0123456789") {
		t.Errorf("error %q shows the server's secret", msg)
	}
}
