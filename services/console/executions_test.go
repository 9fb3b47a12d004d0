package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/services/console"
	"github.com/relaystation/relay/tools"
)

// TestRunningExecutionsCancel: the Tools page lists the executions the tool
// runners report as running, and its Cancel button asks the runners to
// cancel one in the name of the signed-in operator. A stand-in answers the
// runner's subjects here; the real cancel path is tested end to end in
// internal/cli (TestMCPActiveAndCancel, TestCodeRunCancelFromSlack).
func TestRunningExecutionsCancel(t *testing.T) {
	t.Parallel()
	base, b := startConsole(t, console.Config{})
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	running := tools.Execution{ID: id, Server: "everything", Tool: "trigger-long-running-operation",
		Thread: "slack:T1/C1/1700000000.000100", Actor: "slack:U0ONCALL", Started: time.Now().Add(-3 * time.Second)}
	var mu sync.Mutex
	var cancels []tools.CancelRequest
	answer := func(subject string, reply func(data []byte) any) {
		sub, err := b.Conn().Subscribe(b.Prefix()+"."+subject, func(m *nats.Msg) {
			body, _ := json.Marshal(reply(m.Data))
			_ = m.Respond(body)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	answer(tools.SubjectStatus, func([]byte) any {
		return tools.StatusResponse{Servers: []tools.ServerStatus{{Name: "everything", State: "ready", ToolNames: []string{"echo", "trigger-long-running-operation"}}}}
	})
	// An execution of a `relay mcp call` process, which takes no cancels over
	// NATS: listed without a Cancel button.
	const cliID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	cli := tools.Execution{ID: cliID, Server: "everything", Tool: "echo", Actor: "cli:ops", Started: time.Now(),
		Process: "relay mcp call (pid 42 on ops-1)"}
	answer(tools.SubjectActive, func([]byte) any { return tools.ActiveResponse{Executions: []tools.Execution{running, cli}} })
	answer(tools.SubjectCancel, func(data []byte) any {
		var req tools.CancelRequest
		_ = json.Unmarshal(data, &req)
		mu.Lock()
		cancels = append(cancels, req)
		mu.Unlock()
		return tools.CancelResponse{Cancelled: req.ID == id}
	})

	c := newClient(t, base)
	code, body, _ := c.do(http.MethodGet, "/tools", nil)
	for _, want := range []string{`id="execution-` + id, "everything.trigger-long-running-operation", "slack:U0ONCALL", `action="/executions/` + id + `/cancel"`, "<code>trigger-long-running-operation</code>"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("GET /tools: %d, want 200 with %q; body:\n%s", code, want, body)
		}
	}
	if !strings.Contains(body, `id="execution-`+cliID) || !strings.Contains(body, "runs in relay mcp call (pid 42 on ops-1)") ||
		strings.Contains(body, `action="/executions/`+cliID+`/cancel"`) {
		t.Errorf("GET /tools: want the relay mcp call execution listed with its process and no Cancel button; body:\n%s", body)
	}
	csrf := c.csrf("/tools")
	code, _, h := c.do(http.MethodPost, "/executions/"+id+"/cancel", url.Values{"csrf": {csrf}, "back": {"/tools"}})
	if code != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "Cancelled+execution") {
		t.Fatalf("POST cancel: %d to %q, want 303 with the notice", code, h.Get("Location"))
	}
	code, _, h = c.do(http.MethodPost, "/executions/not-running/cancel", url.Values{"csrf": {csrf}, "back": {"/tools"}})
	if code != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "Failed") {
		t.Errorf("POST cancel of an execution not running: %d to %q, want 303 with a failure notice", code, h.Get("Location"))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(cancels) != 2 || cancels[0].ID != id || cancels[0].Actor != "console:local" {
		t.Errorf("cancel requests: got %+v, want %s by console:local first", cancels, id)
	}
}
