package approvals_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/approvals"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

const (
	author   = "U0AUTHOR1"
	threadCh = "C0THREAD1"
	threadTS = "1700000000.000100"
)

type elicited struct {
	a   *tools.Answer
	err error
}

// serving waits until the worker answers questions (it subscribes when Run starts).
func (h *harness) serving() {
	h.t.Helper()
	testenv.WaitFor(h.t, 10*time.Second, "the worker serving "+tools.SubjectElicitExpire, func() bool {
		ctx, cancel := context.WithTimeout(h.t.Context(), time.Second)
		defer cancel()
		_, err := h.bus.Conn().RequestWithContext(ctx, h.bus.Prefix()+"."+tools.SubjectElicitExpire, []byte(`{"id":"probe"}`))
		return err == nil
	})
}

// ask sends q over the bus as the tool runner does and returns where the
// answer will arrive.
func (h *harness) ask(q *tools.Question, wait time.Duration) <-chan elicited {
	h.t.Helper()
	h.serving()
	q.Deadline = time.Now().Add(wait)
	ch := make(chan elicited, 1)
	ctx, cancel := context.WithDeadline(context.Background(), q.Deadline)
	go func() {
		defer cancel()
		a, err := tools.NewBusElicitor(h.bus.Conn(), h.bus.Prefix()).Elicit(ctx, q)
		ch <- elicited{a, err}
	}()
	return ch
}

func question(actsFor string) *tools.Question {
	return &tools.Question{
		ID: "q-" + uuid.NewString(), Server: "db", Tool: "drop_table", CallID: uuid.NewString(), TaskID: uuid.NewString(),
		Thread: "slack:" + team + "/" + threadCh + "/" + threadTS, ActsFor: actsFor, Message: "Which table, and how many copies?",
		Schema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"table": map[string]any{"type": "string", "enum": []any{"users", "orders"}, "enumNames": []any{"Users", "Orders"}},
				"count": map[string]any{"type": "integer", "minimum": 1.0, "title": "Copies"},
				"force": map[string]any{"type": "boolean", "default": true},
				"note":  map[string]any{"type": "string", "description": "anything else"},
			},
			"required": []any{"table", "count"},
		},
	}
}

// unescaped undoes the JSON encoder's HTML escapes in posted blocks.
var unescaped = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace

func (h *harness) ephemerals() []string {
	var out []string
	for _, c := range h.slack.Calls("chat.postEphemeral") {
		out = append(out, c.Params["user"]+": "+c.Params["text"])
	}
	return out
}

// elicitView is the part of the question's form the tests read.
type elicitView struct {
	CallbackID      string `json:"callback_id"`
	PrivateMetadata string `json:"private_metadata"`
	Blocks          []struct {
		Type     string `json:"type"`
		BlockID  string `json:"block_id"`
		Optional bool   `json:"optional"`
		Element  struct {
			Type           string `json:"type"`
			ActionID       string `json:"action_id"`
			MinValue       string `json:"min_value"`
			InitialOptions []any  `json:"initial_options"`
			Options        []struct {
				Value string `json:"value"`
				Text  struct {
					Text string `json:"text"`
				} `json:"text"`
			} `json:"options"`
		} `json:"element"`
	} `json:"blocks"`
}

// checkElicitForm checks the form views.open showed for question(...): one
// input of the right kind per field, the select's titled options, the
// number's minimum and the checkbox's default. It returns the form.
func checkElicitForm(t *testing.T, formCall fakes.SlackCall) elicitView {
	t.Helper()
	var view elicitView
	if err := json.Unmarshal([]byte(formCall.Params["view"]), &view); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, b := range view.Blocks {
		if b.Type == "input" {
			got[b.BlockID] = b.Element.Type
			if b.BlockID == "elicit_table" && (len(b.Element.Options) != 2 || b.Element.Options[1].Text.Text != "Orders" || b.Optional) {
				t.Errorf("table select %+v, want two titled options, required", b)
			}
			if b.BlockID == "elicit_count" && b.Element.MinValue != "1" {
				t.Errorf("count input min %q, want 1", b.Element.MinValue)
			}
			if b.BlockID == "elicit_force" && (len(b.Element.InitialOptions) != 1 || !b.Optional) {
				t.Errorf("force checkbox %+v, want checked by default, optional", b)
			}
		}
	}
	want := map[string]string{"elicit_table": "static_select", "elicit_count": "number_input", "elicit_force": "checkboxes", "elicit_note": "plain_text_input"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("form field %s is %q, want %q (form %v)", k, got[k], v, got)
		}
	}
	if view.CallbackID != approvals.ViewElicit {
		t.Errorf("callback id %q", view.CallbackID)
	}
	return view
}

func TestQuestionAnsweredInTheCallsThread(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := question(author)
	answer := h.ask(q, time.Minute)

	post := h.posted(1)
	if post.Params["channel"] != threadCh || post.Params["thread_ts"] != threadTS {
		t.Fatalf("posted to %s/%s, want the call's thread %s/%s", post.Params["channel"], post.Params["thread_ts"], threadCh, threadTS)
	}
	if blocks := unescaped(post.Params["blocks"]); !strings.Contains(blocks, "Which table") || !strings.Contains(blocks, "Only <@"+author+"> may answer") {
		t.Errorf("message blocks %s lack the question or who may answer", post.Params["blocks"])
	}
	acts := post.Actions()
	if len(acts) != 3 || acts[0].ActionID != approvals.ActionElicitAnswer || acts[0].Value != q.ID {
		t.Fatalf("buttons %+v, want Answer, Decline, Cancel carrying %s", acts, q.ID)
	}

	// Someone else (even an approver) may not answer for the author.
	h.interact(click(approver, approvals.ActionElicitAnswer, q.ID, post.Params["_ts"]))
	testenv.WaitFor(t, 10*time.Second, "refusal", func() bool { return len(h.ephemerals()) == 1 })
	if e := h.ephemerals()[0]; !strings.HasPrefix(e, approver+": Only <@"+author+">") {
		t.Errorf("refusal %q", e)
	}

	h.interact(click(author, approvals.ActionElicitAnswer, q.ID, post.Params["_ts"]))
	testenv.WaitFor(t, 10*time.Second, "the form", func() bool { return len(h.slack.Calls("views.open")) == 1 })
	view := checkElicitForm(t, h.slack.Calls("views.open")[0])

	// A value out of range is refused and the question stays open.
	values := func(count string) map[string]any {
		return map[string]any{
			"elicit_table": map[string]any{"v": map[string]any{"type": "static_select", "selected_option": map[string]any{"value": "orders"}}},
			"elicit_count": map[string]any{"v": map[string]any{"type": "number_input", "value": count}},
			"elicit_force": map[string]any{"v": map[string]any{"type": "checkboxes", "selected_options": []any{}}},
			"elicit_note":  map[string]any{"v": textInput("")},
		}
	}
	h.interact(submit(author, approvals.ViewElicit, view.PrivateMetadata, values("0")))
	testenv.WaitFor(t, 10*time.Second, "out-of-range refusal", func() bool { return len(h.ephemerals()) == 2 })
	if e := h.ephemerals()[1]; !strings.Contains(e, "Copies is out of range") {
		t.Errorf("refusal %q", e)
	}
	h.interact(submit(author, approvals.ViewElicit, view.PrivateMetadata, values("3")))
	var res elicited
	select {
	case res = <-answer:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer reached the tool runner")
	}
	if res.err != nil {
		t.Fatalf("Elicit: %v", res.err)
	}
	b, _ := json.Marshal(res.a)
	if string(b) != `{"action":"accept","content":{"count":3,"force":false,"table":"orders"},"by":"`+author+`"}` {
		t.Errorf("answer %s", b)
	}
	testenv.WaitFor(t, 10*time.Second, "message shows the answer", func() bool {
		ups := h.slack.Calls("chat.update")
		return len(ups) == 1 && strings.Contains(unescaped(ups[0].Params["blocks"]), "Answered by <@"+author+">") && !strings.Contains(ups[0].Params["blocks"], "button")
	})

	// A second click finds it closed.
	h.interact(click(author, approvals.ActionElicitDecline, q.ID, post.Params["_ts"]))
	testenv.WaitFor(t, 10*time.Second, "closed notice", func() bool { return len(h.ephemerals()) == 3 })
	if e := h.ephemerals()[2]; !strings.Contains(e, "already closed (accept)") {
		t.Errorf("late click: %q", e)
	}
}

func TestQuestionOfAgentTaskDeclinedByApprover(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := question("")
	answer := h.ask(q, time.Minute)
	post := h.posted(1)
	h.interact(click("U0NOBODY1", approvals.ActionElicitCancel, q.ID, post.Params["_ts"]))
	testenv.WaitFor(t, 10*time.Second, "refusal", func() bool { return len(h.ephemerals()) == 1 })
	if e := h.ephemerals()[0]; !strings.Contains(e, "Only an approver") {
		t.Errorf("refusal %q", e)
	}
	h.interact(click(approver, approvals.ActionElicitDecline, q.ID, post.Params["_ts"]))
	res := <-answer
	if res.err != nil || res.a.Action != tools.ElicitDecline || res.a.By != approver || res.a.Content != nil {
		t.Fatalf("got %+v, %v; want a decline by the approver", res.a, res.err)
	}
}

func TestQuestionTimeoutDeclines(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	q := question(author)
	start := time.Now()
	answer := h.ask(q, 500*time.Millisecond)
	post := h.posted(1)
	res := <-answer
	if !errors.Is(res.err, tools.ErrElicitTimeout) || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("got %+v, %v after %s; want ErrElicitTimeout at the deadline", res.a, res.err, time.Since(start))
	}
	testenv.WaitFor(t, 10*time.Second, "message shows the timeout", func() bool {
		ups := h.slack.Calls("chat.update")
		return len(ups) == 1 && strings.Contains(ups[0].Params["blocks"], "Nobody answered in time")
	})
	h.interact(click(author, approvals.ActionElicitAnswer, q.ID, post.Params["_ts"]))
	testenv.WaitFor(t, 10*time.Second, "closed notice", func() bool { return len(h.ephemerals()) == 1 })
	if e := h.ephemerals()[0]; !strings.Contains(e, "already closed (expired)") {
		t.Errorf("late click: %q", e)
	}
	if n := len(h.slack.Calls("views.open")); n != 0 {
		t.Errorf("a form opened for an expired question (%d)", n)
	}
}

func TestQuestionWithoutHuman(t *testing.T) {
	t.Parallel()
	// No approvals worker on this bus: nobody to ask.
	b := bustest.Embedded(t)
	el := tools.NewBusElicitor(b.Conn(), b.Prefix())
	q := question(author)
	q.Deadline = time.Now().Add(time.Minute)
	if _, err := el.Elicit(t.Context(), q); !errors.Is(err, tools.ErrNoHuman) {
		t.Errorf("no worker: got %v, want ErrNoHuman", err)
	}
	// A call outside Slack is not sent at all.
	q.Thread = "github:acme/widgets#7"
	if _, err := el.Elicit(t.Context(), q); !errors.Is(err, tools.ErrNoHuman) {
		t.Errorf("github thread: got %v, want ErrNoHuman", err)
	}
	// Slack refusing the post: the worker says nobody can be asked.
	h := newHarness(t)
	h.slack.Fail("chat.postMessage", "not_in_channel")
	q.Thread = "slack:" + team + "/" + threadCh + "/" + threadTS
	res := <-h.ask(q, time.Minute)
	if !errors.Is(res.err, tools.ErrNoHuman) || !strings.Contains(res.err.Error(), "not_in_channel") {
		t.Errorf("post failed: got %v, want ErrNoHuman naming Slack's error", res.err)
	}
}

// TestToolCallAsksInSlack runs the whole path: a tool call on a real MCP
// server (go-sdk, streamable HTTP) whose tool elicits; the tool runner sends
// the question over the bus; this worker asks in the call's Slack thread;
// the author answers through the form; the server gets the answer.
func TestToolCallAsksInSlack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := mcp.NewServer(&mcp.Implementation{Name: "deploy", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "release"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Which environment?", RequestedSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"env": map[string]any{"type": "string", "enum": []any{"staging", "production"}}},
			"required":   []any{"env"},
		}})
		if err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s %v", res.Action, res.Content["env"])}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	r := toolstest.StartReady(t, tools.Config{
		Servers:  []mcpconfig.Server{{Name: "deploy", Type: mcpconfig.HTTP, URL: srv.URL, ProtocolVersion: mcpconfig.DefaultProtocolVersion}},
		Elicitor: tools.NewBusElicitor(h.bus.Conn(), h.bus.Prefix()),
	})
	h.serving()

	done := make(chan *tools.Result, 1)
	go func() {
		done <- r.Call(t.Context(), tools.Request{Tool: "deploy.release", Operator: true, CallID: "call-1",
			Thread: "slack:" + team + "/" + threadCh + "/" + threadTS, ActsFor: author})
	}()
	post := h.posted(1)
	if post.Params["thread_ts"] != threadTS || !strings.Contains(post.Params["blocks"], "deploy.release") {
		t.Fatalf("question posted as %+v", post.Params)
	}
	h.selectAnswer(post, "env", "production")
	if res := testenv.Receive(t, done, 20*time.Second, "the call to finish"); res.Err != nil || res.Text != "accept production" {
		t.Fatalf("tool result %q, %v; want the author's answer", res.Text, res.Err)
	}
}

// A question of a server that is disabled while it waits is cancelled: the
// runner's Elicitor closes it as cancelled and the Slack message says why.
func TestQuestionOfDisabledServerIsCancelled(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.serving()
	q := question(author)
	q.Deadline = time.Now().Add(time.Minute)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ch := make(chan elicited, 1)
	go func() {
		a, err := tools.NewBusElicitor(h.bus.Conn(), h.bus.Prefix()).Elicit(ctx, q)
		ch <- elicited{a, err}
	}()
	post := h.posted(1)
	cancel(fmt.Errorf("%w: db was disabled (misbehaves)", tools.ErrDisabled))
	res := <-ch
	if !errors.Is(res.err, tools.ErrDisabled) || res.a != nil {
		t.Fatalf("got %+v, %v; want the disable as the error", res.a, res.err)
	}
	testenv.WaitFor(t, 10*time.Second, "message shows the cancel", func() bool {
		ups := h.slack.Calls("chat.update")
		return len(ups) == 1 && strings.Contains(ups[0].Params["blocks"], "Cancelled by the relay") &&
			strings.Contains(ups[0].Params["blocks"], "db was disabled")
	})

	h.interact(click(author, approvals.ActionElicitAnswer, q.ID, post.Params["_ts"]))
	testenv.WaitFor(t, 10*time.Second, "closed notice", func() bool { return len(h.ephemerals()) == 1 })
	if e := h.ephemerals()[0]; !strings.Contains(e, "already closed") {
		t.Errorf("late click: %q", e)
	}
}

// selectAnswer answers the question of message post as the author: Answer…,
// then the form submitted with value chosen in the select of field.
func (h *harness) selectAnswer(post fakes.SlackCall, field, value string) {
	h.t.Helper()
	forms := len(h.slack.Calls("views.open"))
	h.interact(click(author, approvals.ActionElicitAnswer, post.Actions()[0].Value, post.Params["_ts"]))
	testenv.WaitFor(h.t, 10*time.Second, "the form", func() bool { return len(h.slack.Calls("views.open")) == forms+1 })
	var view struct {
		PrivateMetadata string `json:"private_metadata"`
	}
	_ = json.Unmarshal([]byte(h.slack.Calls("views.open")[forms].Params["view"]), &view)
	h.interact(submit(author, approvals.ViewElicit, view.PrivateMetadata, map[string]any{
		"elicit_" + field: map[string]any{"v": map[string]any{"type": "static_select", "selected_option": map[string]any{"value": value}}},
	}))
}
