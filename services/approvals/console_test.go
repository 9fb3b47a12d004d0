package approvals_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/rpc/approvalrpc"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/approvals"
)

// newConsoleHarness runs the worker without Slack settings (console only).
func newConsoleHarness(t *testing.T) *harness {
	t.Helper()
	return newHarness(t, func(c *approvals.Config) {
		c.BotToken, c.Channel, c.Channels, c.Approvers = secret.Value{}, "", nil, nil
	})
}

// pendingItem waits until the task is listed as pending and returns it.
func (h *harness) pendingItem(task string) approvalrpc.Item {
	h.t.Helper()
	var it approvalrpc.Item
	testenv.WaitFor(h.t, 10*time.Second, "task "+task+" pending in the list", func() bool {
		items, err := approvalrpc.List(h.t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.ListRequest{})
		for _, x := range items {
			if err == nil && x.TaskID == task {
				it = x
				return true
			}
		}
		return false
	})
	return it
}

func (h *harness) decide(req approvalrpc.DecideRequest) *approvalrpc.DecideResponse {
	h.t.Helper()
	resp, err := approvalrpc.Decide(h.t.Context(), h.bus.Conn(), h.bus.Prefix(), req)
	if err != nil {
		h.t.Fatalf("decide %+v: %v", req, err)
	}
	return resp
}

func TestConsoleOnlyApproveOnce(t *testing.T) {
	t.Parallel()
	h := newConsoleHarness(t)
	out := bustest.Observe(t, h.bus, "obs-out", "out.github")
	task, _ := h.suggestion(github7, "Console answer")
	it := h.pendingItem(task)
	if it.Status != "pending" || it.Text != "Console answer" || it.Target != github7.String() {
		t.Fatalf("got item %+v, want pending %q for %s", it, "Console answer", github7.String())
	}
	edited := h.decide(approvalrpc.DecideRequest{TaskID: task, Action: approvalrpc.ActionEdit, By: "alice", Text: "Edited in the console"})
	if !edited.Won || edited.Item.EditedBy != approvals.ConsolePrefix+"alice" {
		t.Fatalf("edit: got %+v, want won, edited by console:alice", edited)
	}
	// A double click: two approvals at once, one wins, one post.
	var wg sync.WaitGroup
	wins := make(chan bool, 2)
	for range 2 {
		wg.Go(func() {
			r, err := approvalrpc.Decide(t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.DecideRequest{TaskID: task, Action: approvalrpc.ActionApprove, By: "alice"})
			if err != nil {
				t.Errorf("approve: %v", err)
				return
			}
			wins <- r.Won
		})
	}
	wg.Wait()
	close(wins)
	n := 0
	for w := range wins {
		if w {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("got %d winning approvals, want 1", n)
	}
	e := <-out
	if e.Content != "Edited in the console" || !strings.Contains(mustJSON(t, e.Meta.Extra["approval"]), `"decided_by":"console:alice"`) {
		t.Fatalf("got out envelope %q approval %s, want the edited text decided by console:alice", e.Content, mustJSON(t, e.Meta.Extra["approval"]))
	}
	testenv.Quiet(t, out, 300*time.Millisecond, "second outbound envelope")
	if calls := h.slack.Calls("chat.postMessage"); len(calls) != 0 {
		t.Fatalf("got %d Slack posts without Slack settings, want 0", len(calls))
	}
}

func TestConsoleReject(t *testing.T) {
	t.Parallel()
	h := newConsoleHarness(t)
	task, _ := h.suggestion(github7, "To reject")
	h.pendingItem(task)
	r := h.decide(approvalrpc.DecideRequest{TaskID: task, Action: approvalrpc.ActionReject, By: "bob", Reason: "wrong"})
	if !r.Won || r.Item.Status != "rejected" || r.Item.Reason != "wrong" || r.Item.DecidedBy != "console:bob" {
		t.Fatalf("got %+v, want rejected by console:bob for wrong", r)
	}
	again := h.decide(approvalrpc.DecideRequest{TaskID: task, Action: approvalrpc.ActionApprove, By: "carol"})
	if again.Won || again.Item.Status != "rejected" {
		t.Fatalf("approve after reject: got %+v, want not won, still rejected", again)
	}
	for _, bad := range []approvalrpc.DecideRequest{
		{TaskID: task, Action: "maybe", By: "bob"},
		{TaskID: task, Action: approvalrpc.ActionApprove},
		{TaskID: "no-such-task", Action: approvalrpc.ActionApprove, By: "bob"},
	} {
		if _, err := approvalrpc.Decide(t.Context(), h.bus.Conn(), h.bus.Prefix(), bad); err == nil {
			t.Errorf("decide %+v: got no error, want one", bad)
		}
	}
}

// TestConsoleListDecidedBehindPending: the decided ones are listed, most
// recently decided first, however many pending ones are newer.
func TestConsoleListDecidedBehindPending(t *testing.T) {
	t.Parallel()
	h := newConsoleHarness(t)
	first, _ := h.suggestion(github7, "Decided first")
	h.pendingItem(first)
	second, _ := h.suggestion(github7, "Decided second")
	h.pendingItem(second)
	h.decide(approvalrpc.DecideRequest{TaskID: second, Action: approvalrpc.ActionReject, By: "bob", Reason: "no"})
	h.decide(approvalrpc.DecideRequest{TaskID: first, Action: approvalrpc.ActionReject, By: "bob", Reason: "no"})
	for i := range 3 {
		task, _ := h.suggestion(github7, fmt.Sprintf("Still pending %d", i))
		h.pendingItem(task)
	}
	items, err := approvalrpc.List(t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.ListRequest{All: true, Decided: true, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		got = append(got, it.TaskID+" "+it.Status)
	}
	if want := []string{first + " rejected", second + " rejected"}; !slices.Equal(got, want) {
		t.Errorf("decided: got %v, want %v (the last decided first)", got, want)
	}
}

// TestConsoleListTotal: a list cut by its limit says how many matched.
func TestConsoleListTotal(t *testing.T) {
	t.Parallel()
	h := newConsoleHarness(t)
	for i := range 3 {
		task, _ := h.suggestion(github7, fmt.Sprintf("Pending %d", i))
		h.pendingItem(task)
	}
	items, total, err := approvalrpc.ListTotal(t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.ListRequest{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || total != 3 {
		t.Errorf("got %d items of %d, want 2 of 3", len(items), total)
	}
}

// longSuggestions runs a console-only worker on the machine's NATS server
// (its default max payload, 1 MB) with n pending suggestions of size bytes
// each, more than one reply holds, and waits until all are listed.
func longSuggestions(t *testing.T, n, size int) *harness {
	t.Helper()
	h := newHarnessOn(t, bustest.External(t), nil, func(c *approvals.Config) {
		c.BotToken, c.Channel, c.Channels, c.Approvers = secret.Value{}, "", nil, nil
	})
	if max := h.bus.Conn().MaxPayload(); int64(n*size) <= max {
		t.Fatalf("%d suggestions of %d bytes fit the server's max payload %d: the test proves nothing", n, size, max)
	}
	for i := range n {
		h.suggestion(github7, fmt.Sprintf("%03d ", i)+strings.Repeat("é", size/2))
	}
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("%d suggestions pending", n), func() bool {
		_, total, err := approvalrpc.ListTotal(t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.ListRequest{Limit: 1})
		return err == nil && total == n
	})
	return h
}

// TestConsoleListFitsMaxPayload: suggestions whose texts together exceed the
// server's max payload still list: as many whole items as one reply holds,
// and the reply says how many it left out.
func TestConsoleListFitsMaxPayload(t *testing.T) {
	t.Parallel()
	h := longSuggestions(t, 100, 20<<10)
	resp, err := approvalrpc.ListPage(t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.ListRequest{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if resp.Total != 100 || len(resp.Items) == 0 || len(resp.Items)+resp.Omitted != 100 {
		t.Fatalf("got %d items, %d omitted, total %d; want some items, the rest omitted, total 100", len(resp.Items), resp.Omitted, resp.Total)
	}
	for _, it := range resp.Items {
		if it.Cut || len(it.Text) < 20<<10 {
			t.Fatalf("item %s: got a text of %d bytes (cut %v), want it whole", it.TaskID, len(it.Text), it.Cut)
		}
	}
}

// TestConsoleListPreviews: asked for previews, the list holds every item
// with its text cut, and Get returns one whole; an edit keeps its full text.
func TestConsoleListPreviews(t *testing.T) {
	t.Parallel()
	const size = 20 << 10
	h := longSuggestions(t, 100, size)
	resp, err := approvalrpc.ListPage(t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.ListRequest{Preview: approvalrpc.PreviewBytes})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(resp.Items) != 100 || resp.Omitted != 0 || resp.Total != 100 {
		t.Fatalf("got %d items, %d omitted, total %d; want 100, 0, 100", len(resp.Items), resp.Omitted, resp.Total)
	}
	for _, it := range resp.Items {
		if !it.Cut || len(it.Text) > approvalrpc.PreviewBytes || !utf8.ValidString(it.Text) || !strings.HasSuffix(it.Text, "…") {
			t.Fatalf("item %s: got a text of %d bytes (cut %v), want a valid preview of at most %d bytes ending in …", it.TaskID, len(it.Text), it.Cut, approvalrpc.PreviewBytes)
		}
	}
	task := resp.Items[0].TaskID
	whole, err := approvalrpc.Get(t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.GetRequest{TaskID: task})
	if err != nil {
		t.Fatalf("get %s: %v", task, err)
	}
	if whole.Cut || len(whole.Text) < size || !strings.HasPrefix(whole.Text, strings.TrimSuffix(resp.Items[0].Text, "…")) {
		t.Fatalf("get %s: got %d bytes (cut %v), want the whole text of the preview", task, len(whole.Text), whole.Cut)
	}
	edited := whole.Text + " (edited)"
	if r := h.decide(approvalrpc.DecideRequest{TaskID: task, Action: approvalrpc.ActionEdit, By: "alice", Text: edited}); r.Item.Text != edited {
		t.Fatalf("edit: got a text of %d bytes, want the %d edited", len(r.Item.Text), len(edited))
	}
	short, _ := h.suggestion(github7, "Short")
	if it := h.pendingItem(short); it.Cut || it.Text != "Short" {
		t.Fatalf("got %+v, want a short text whole and not cut", it)
	}
	if _, err := approvalrpc.Get(t.Context(), h.bus.Conn(), h.bus.Prefix(), approvalrpc.GetRequest{TaskID: "no-such-task"}); err == nil {
		t.Fatal("get no-such-task: got no error, want one")
	}
}
