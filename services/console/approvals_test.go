package console_test

import (
	"html"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/rpc/approvalrpc"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/approvals"
	"github.com/relaystation/relay/services/console"
)

// TestApprovalsLongText: a long suggestion is listed as a preview with a
// link to its whole text, and editing starts from the whole text, never
// from the preview.
func TestApprovalsLongText(t *testing.T) {
	t.Parallel()
	base, b := startConsole(t, console.Config{})
	worker, err := approvals.New(t.Context(), approvals.Config{SweepInterval: time.Hour}, b, nil)
	if err != nil {
		t.Fatalf("approvals.New: %v", err)
	}
	testenv.Go(t, "approvals", worker.Run)
	long := "Start of the answer. " + strings.Repeat("A long LLM answer, line after line. ", 600) + "The end."
	e := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, long)
	e.Meta.TaskID, e.Meta.Thread = "task-long", "github:acme/widgets#7"
	e.Meta.SetTarget(&envelope.Target{Channel: "github", Owner: "acme", Repo: "widgets", Number: 7})
	if _, err := b.Publish(t.Context(), approvals.SubjectSuggestion, e); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the suggestion pending", func() bool {
		items, err := approvalrpc.List(t.Context(), b.Conn(), b.Prefix(), approvalrpc.ListRequest{})
		return err == nil && len(items) == 1
	})
	c := newClient(t, base)
	code, body, _ := c.do(http.MethodGet, "/approvals", nil)
	body = html.UnescapeString(body)
	if code != http.StatusOK || !strings.Contains(body, "Start of the answer.") || strings.Contains(body, "The end.") ||
		!strings.Contains(body, `href="/approvals?edit=task-long#approval-task-long"`) || strings.Contains(body, `name="text"`) {
		t.Fatalf("GET /approvals: %d, want a preview of the text, a link to the whole one and no edit box of the preview; body:\n%s", code, body)
	}
	code, body, _ = c.do(http.MethodGet, "/approvals?edit=task-long", nil)
	body = html.UnescapeString(body)
	if code != http.StatusOK || !strings.Contains(body, ">"+long+"</textarea>") {
		t.Fatalf("GET /approvals?edit=task-long: %d, want the whole text in the edit box; body:\n%s", code, body)
	}
}
