package approvals_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/services/approvals"
	"github.com/relaystation/relay/services/toolrunner"
)

// TestCancelRunButton clicks the Cancel button of a running code-block run:
// the worker asks rpc.tool.active who runs what, refuses a stranger, sends
// the cancel request with the clicking user as actor to rpc.tool.cancel
// (both answered here by responders standing in for the tool runner) for
// the run's author or an approver, and tells the user the outcome.
func TestCancelRunButton(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	running, done, gone := uuid.NewString(), uuid.NewString(), uuid.NewString()
	asub, err := h.bus.Conn().Subscribe(h.bus.Prefix()+".rpc.tool.active", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"executions":[{"id":"` + running + `","server":"everything","tool":"echo","actor":"slack:U0CLICKER"}]}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = asub.Unsubscribe() })
	var mu sync.Mutex
	var got []map[string]string
	sub, err := h.bus.Conn().Subscribe(h.bus.Prefix()+"."+approvals.SubjectCancel, func(m *nats.Msg) {
		var req map[string]string
		_ = json.Unmarshal(m.Data, &req)
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		reply := `{"cancelled":true}`
		if req["id"] != running {
			reply = `{"cancelled":false,"error":"execution ` + req["id"] + ` is not running"}`
		}
		_ = m.Respond([]byte(reply))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	cases := []struct{ id, user, want string }{
		{running, "U0STRANGER", "You may not cancel this run"},
		{running, "U0CLICKER", "Cancelling the run"},
		{done, approver, "is not running"},
		{gone, "U0OTHER", "it is not running"},
	}
	for i, c := range cases {
		h.interact(click(c.user, slackmapper.ActionCancelRun, c.id, "1700000111.000001"))
		testenv.WaitFor(t, 10*time.Second, "an ephemeral answer", func() bool { return len(h.slack.Calls("chat.postEphemeral")) > i })
		e := h.slack.Calls("chat.postEphemeral")[i]
		if e.Params["user"] != c.user || !strings.Contains(e.Params["text"], c.want) {
			t.Errorf("click %d: got ephemeral %v, want %q to %s", i, e.Params, c.want, c.user)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0]["id"] != running || got[0]["actor"] != "slack:U0CLICKER" || got[1]["id"] != done || got[1]["actor"] != "slack:"+approver {
		t.Errorf("got cancel requests %v, want the execution ids with the clickers as actors", got)
	}
}

// TestStopSwitchFromSlack sends `/relay stop` and `/relay resume` through the
// Slack mapper: an approver flips the tool runner's persisted stop switch and
// the channel is told; anyone else is refused.
func TestStopSwitchFromSlack(t *testing.T) {
	t.Parallel()
	lazy := &lazyStop{}
	h := newHarness(t, func(c *approvals.Config) { c.Stop = lazy })
	st, err := toolrunner.OpenState(t.Context(), h.bus)
	if err != nil {
		t.Fatal(err)
	}
	lazy.st.Store(st)
	stopped := func() bool {
		s, err := st.Load(t.Context())
		return err == nil && s.Stop
	}
	// The commands consumer starts at new messages (old commands are never
	// replayed): wait until it exists.
	bustest.WaitConsumer(t, h.bus, approvals.SubjectCommands, "approvals-commands", 10*time.Second)
	h.command("U0INTRUDER", "stop")
	testenv.WaitFor(t, 10*time.Second, "a refusal", func() bool { return len(h.slack.Calls("chat.postEphemeral")) == 1 })
	if stopped() {
		t.Fatal("a non-approver turned the stop switch on")
	}
	h.command(approver, "stop")
	testenv.WaitFor(t, 10*time.Second, "the stop switch on", stopped)
	h.command(approver, "resume")
	testenv.WaitFor(t, 10*time.Second, "the stop switch off", func() bool { return !stopped() })
	testenv.WaitFor(t, 10*time.Second, "two announcements on out.slack", func() bool { return len(h.streamMsgs("out.slack")) == 2 })
	outs := h.streamMsgs("out.slack")
	if !strings.Contains(outs[0].Content, "stop switch ON") || !strings.Contains(outs[1].Content, "stop switch OFF") {
		t.Errorf("got announcements %q, %q", outs[0].Content, outs[1].Content)
	}
	if tg, _ := outs[0].Meta.Target(); tg == nil || tg.SlackCh != "C0OPS01" {
		t.Errorf("announcement target %+v, want the command's channel", tg)
	}
}

// lazyStop is a StopSwitch whose state bucket is opened on the harness's bus
// after the worker was built.
type lazyStop struct {
	st atomic.Pointer[toolrunner.KVState]
}

func (l *lazyStop) SetStop(ctx context.Context, stop bool) error {
	return l.st.Load().SetStop(ctx, stop)
}

// command sends `/relay <text>` by user in C0OPS01 through the Slack mapper.
func (h *harness) command(user, text string) {
	h.t.Helper()
	form := url.Values{"command": {"/relay"}, "text": {text}, "user_id": {user}, "channel_id": {"C0OPS01"},
		"team_id": {team}, "trigger_id": {"1700000400." + uuid.NewString()}}
	h.deliver(slackmapper.RouteCommands, []byte(form.Encode()))
}
