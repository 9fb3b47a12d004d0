package approvals_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/approvals"
)

// crashingAPI is the Slack client of the fake, except that the first
// chat.postMessage goes wrong right after Slack accepted it, before the
// worker can record the message's ts: the worker dies (a panic, so the
// message is redelivered) or the answer is lost (an error).
type crashingAPI struct {
	*slack.Client
	lose    bool // lose the answer instead of dying
	crashed atomic.Bool
}

func (c *crashingAPI) PostMessageContext(ctx context.Context, channel string, opts ...slack.MsgOption) (string, string, error) {
	ch, ts, err := c.Client.PostMessageContext(ctx, channel, opts...)
	if err == nil && c.crashed.CompareAndSwap(false, true) {
		if c.lose {
			return "", "", errors.New("read tcp: connection reset by peer")
		}
		panic("crash after posting " + ts)
	}
	return ch, ts, err
}

// TestCrashAfterPostPostsOnce: a worker that dies between posting the
// approval message and recording its ts leaves a claim; the redelivered
// suggestion takes the claim over once it expires, finds the message in Slack
// by its metadata and records it instead of posting a second one. Approving
// then updates that message. A post whose answer was lost is found the same
// way.
func TestCrashAfterPostPostsOnce(t *testing.T) {
	t.Parallel()
	for _, lose := range []bool{false, true} {
		t.Run(map[bool]string{false: "crash", true: "lost answer"}[lose], func(t *testing.T) {
			t.Parallel()
			testCrashAfterPost(t, lose)
		})
	}
}

func testCrashAfterPost(t *testing.T, lose bool) {
	api := &crashingAPI{lose: lose}
	h2 := newHarnessAPI(t, func(url string) approvals.SlackAPI {
		api.Client = slack.New("xoxb-test", slack.OptionAPIURL(url))
		return api
	})
	task, _ := h2.suggestion(github7, "Draft.")
	ts := h2.messageTS(1)
	deadline := time.Now().Add(40 * time.Second)
	for {
		rec, err := record(t, h2, task)
		if err == nil && rec.SlackTS != "" {
			if rec.SlackTS != ts {
				t.Fatalf("recorded ts %q, want the crashed post's %q", rec.SlackTS, ts)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the message posted before the crash was never recorded (record %+v, err %v)", rec, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !api.crashed.Load() {
		t.Fatal("the worker never crashed; the test tests nothing")
	}
	if n := len(h2.slack.Calls("chat.postMessage")); n != 1 {
		t.Fatalf("posted %d approval messages, want 1", n)
	}
	if n := len(h2.slack.Calls("conversations.history")); n == 0 {
		t.Error("the take-over did not look in Slack for the message")
	}
	h2.interact(click(approver, approvals.ActionApprove, task, ts))
	testenv.WaitFor(t, 10*time.Second, "out.github", func() bool { return len(h2.streamMsgs("out.github")) == 1 })
	h2.drained()
	if n := len(h2.slack.Calls("chat.postMessage")); n != 1 {
		t.Errorf("posted %d approval messages after the approval, want 1", n)
	}
}

// record reads the task's approval record from the bucket.
func record(t *testing.T, h *harness, task string) (*approvals.Record, error) {
	t.Helper()
	kv, err := h.bus.JetStream().KeyValue(t.Context(), approvals.Bucket(h.bus.Prefix()))
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(t.Context(), task)
	if err != nil {
		return nil, err
	}
	var r approvals.Record
	return &r, json.Unmarshal(e.Value(), &r)
}

// TestApproveDuringCrashedClaim: an approval clicked while the message of a
// crashed poster is still unrecorded is decided at once; once the claim
// expires, the message found in Slack (which shows what the crashed worker
// rendered: pending) is updated to show the decision.
func TestApproveDuringCrashedClaim(t *testing.T) {
	t.Parallel()
	api := &crashingAPI{}
	h := newHarnessAPI(t, func(url string) approvals.SlackAPI {
		api.Client = slack.New("xoxb-test", slack.OptionAPIURL(url))
		return api
	})
	task, _, ts := h.firstApproval("Draft.")
	h.approveUntil(task, ts, 1, "out.github")
	testenv.WaitFor(t, 40*time.Second, "the crashed post updated to show the approval", func() bool {
		for _, c := range h.slack.Calls("chat.update") {
			if c.Params["ts"] == ts && strings.Contains(c.Params["text"]+c.Params["blocks"], approver) {
				return true
			}
		}
		return false
	})
	if !api.crashed.Load() {
		t.Fatal("the worker never crashed; the test tests nothing")
	}
	if n := len(h.slack.Calls("chat.postMessage")); n != 1 {
		t.Errorf("posted %d approval messages, want 1", n)
	}
}

// TestDecisionAuditRetried: a decision whose audit record cannot be published
// (here the worker's NATS user may not publish on audit subjects, so the
// publish goes unanswered until the bus's request timeout) is not taken as
// announced: the click's delivery is tried again (held by the bus, which
// takes the timeout for the bus being unavailable, and given back when the
// worker stops), and a worker that can publish it finishes the announcement. The decision is announced and audited
// once each, and the answer published once.
func TestDecisionAuditRetried(t *testing.T) {
	t.Parallel()
	ns := bustest.StartServer(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "full", Password: "full"},
			{Username: "noaudit", Password: "noaudit", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: []string{"relay.audit.>"}}}},
		}})
	connect := func(user string) *bus.Bus {
		b, err := bus.Connect(t.Context(), bus.Config{URL: fmt.Sprintf("nats://%s:%s@%s", user, user, ns.Addr()), Name: t.Name() + "-" + user,
			RequestTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	h := newHarnessOn(t, connect("noaudit"), nil)
	task, _, ts := h.firstApproval("Draft.")
	h.interact(click(approver, approvals.ActionApprove, task, ts))
	testenv.WaitFor(t, 20*time.Second, "the decision announced and the click still unacknowledged", func() bool {
		c, err := h.bus.JetStream().Consumer(t.Context(), h.bus.StreamName("in.x"), "approvals-actions")
		return err == nil && c.CachedInfo().NumAckPending > 0 && len(h.streamMsgs("approval.decided")) == 1
	})
	if rec, err := record(t, h, task); err != nil || rec.Announced {
		t.Fatalf("record %+v (%v): want it decided, not announced, while its audit cannot be published", rec, err)
	}

	h.stop()
	h.bus = connect("full")
	h.start()
	testenv.WaitFor(t, 20*time.Second, "the decision's audit record", func() bool { return len(h.streamMsgs("audit.approvals")) > 0 })
	h.drained()
	if rec, err := record(t, h, task); err != nil || !rec.Announced {
		t.Fatalf("record %+v (%v): want it announced", rec, err)
	}
	var audited []string
	for _, e := range h.streamMsgs("audit.approvals") {
		audited = append(audited, e.Content)
	}
	if len(audited) != 1 || !strings.Contains(audited[0], "approved on task "+task) {
		t.Errorf("audit records %q: want the approval's, once", audited)
	}
	if n, m := len(h.streamMsgs("approval.decided")), len(h.streamMsgs("out.github")); n != 1 || m != 1 {
		t.Errorf("%d decisions announced and %d answers published, want 1 and 1", n, m)
	}
}
