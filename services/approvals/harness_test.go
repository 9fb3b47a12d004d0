package approvals_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/approvals"
)

const (
	signingSecret = "test-signing-secret"
	approvalCh    = "C0APPROVE1"
	team          = "T0TEAM01"
	approver      = "U0BOSS01"
)

// harness runs the worker on an embedded JetStream against a fake Slack.
type harness struct {
	t      *testing.T
	bus    *bus.Bus
	slack  *fakes.Slack
	svc    *approvals.Service
	cfg    approvals.Config
	api    approvals.SlackAPI // nil: the worker builds a client of the fake
	offset atomic.Int64       // added to the clock, to expire suggestions
	stop   func()
}

func newHarness(t *testing.T, mod ...func(*approvals.Config)) *harness {
	t.Helper()
	return newHarnessAPI(t, nil, mod...)
}

// newHarnessAPI is newHarness with the worker's Slack client made by api from
// the fake's URL.
func newHarnessAPI(t *testing.T, api func(url string) approvals.SlackAPI, mod ...func(*approvals.Config)) *harness {
	t.Helper()
	return newHarnessOn(t, bustest.Embedded(t), api, mod...)
}

// newHarnessOn is newHarnessAPI on bus b.
func newHarnessOn(t *testing.T, b *bus.Bus, api func(url string) approvals.SlackAPI, mod ...func(*approvals.Config)) *harness {
	t.Helper()
	h := &harness{t: t, bus: b, slack: fakes.NewSlack(t)}
	if api != nil {
		h.api = api(h.slack.URL())
	}
	h.cfg = approvals.Config{
		BotToken:      secret.New("xoxb-test"),
		APIURL:        h.slack.URL(),
		Channel:       approvalCh,
		Channels:      map[string]string{"sentry": "C0SENTRY1"},
		Approvers:     []string{approver},
		SweepInterval: time.Hour, // tests call Sweep themselves
		Now:           func() time.Time { return time.Now().Add(time.Duration(h.offset.Load())) },
	}
	for _, m := range mod {
		m(&h.cfg)
	}
	h.start()
	return h
}

// start builds and runs a worker on the harness's bus.
func (h *harness) start() {
	h.t.Helper()
	svc, err := approvals.New(h.t.Context(), h.cfg, h.bus, h.api)
	if err != nil {
		h.t.Fatalf("New: %v", err)
	}
	h.svc = svc
	h.stop = testenv.Go(h.t, "Run", svc.Run)
}

// suggestion publishes an agent.suggestion for target and returns its task id.
func (h *harness) suggestion(target envelope.Target, text string) (task string, e *envelope.Envelope) {
	h.t.Helper()
	task = uuid.NewString()
	e = envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, text)
	e.Meta.TaskID = task
	e.Meta.Thread = "github:acme/widgets#7"
	e.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", DeliveryID: "d-1", URL: "https://github.com/acme/widgets/issues/7", Actor: "octocat"}
	e.Meta.SetTarget(&target)
	e.Meta.Set("unknown_refs", []any{"doc-404"})
	e.RetrievalRefs = []string{"doc-1"}
	h.publish(approvals.SubjectSuggestion, e)
	return task, e
}

func (h *harness) publish(subject string, e *envelope.Envelope, opts ...bus.PublishOption) {
	h.t.Helper()
	if _, err := h.bus.Publish(h.t.Context(), subject, e, opts...); err != nil {
		h.t.Fatalf("publish %s: %v", subject, err)
	}
}

var github7 = envelope.Target{Channel: "github", Owner: "acme", Repo: "widgets", Number: 7}

// posted waits for the n-th chat.postMessage and returns it.
func (h *harness) posted(n int) fakes.SlackCall {
	h.t.Helper()
	testenv.WaitFor(h.t, 10*time.Second, "chat.postMessage #"+strconv.Itoa(n), func() bool { return len(h.slack.Calls("chat.postMessage")) >= n })
	return h.slack.Calls("chat.postMessage")[n-1]
}

// messageTS is the ts the fake gave the n-th posted message.
func (h *harness) messageTS(n int) string {
	h.t.Helper()
	return h.posted(n).Params["_ts"]
}

// firstApproval publishes the harness's first suggestion, for github7, and
// returns its task, its envelope and the ts of its approval message.
func (h *harness) firstApproval(text string) (task string, e *envelope.Envelope, ts string) {
	h.t.Helper()
	task, e = h.suggestion(github7, text)
	return task, e, h.messageTS(1)
}

// interact sends a Slack interaction payload through the real Slack mapper
// (signed, verified, mapped) and publishes what it produced, as the webhook
// gateway does.
func (h *harness) interact(payload map[string]any) *envelope.Envelope {
	h.t.Helper()
	raw, err := json.Marshal(payload)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.deliver(slackmapper.RouteInteractions, []byte("payload="+url.QueryEscape(string(raw))))
}

// deliver sends a signed Slack request body to route through the real Slack
// mapper (signed, verified, mapped) and publishes what it produced, as the
// webhook gateway does.
func (h *harness) deliver(route string, body []byte) *envelope.Envelope {
	h.t.Helper()
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	hdr := http.Header{}
	hdr.Set(slackmapper.HeaderTimestamp, ts)
	hdr.Set(slackmapper.HeaderSignature, slackmapper.SignatureHeader(signingSecret, ts, body))
	req := &mappers.Request{Route: route, Header: hdr, Body: body, Received: now}
	p := slackmapper.New(slackmapper.Config{Secret: secret.New(signingSecret)})
	if err := p.Verify(req); err != nil {
		h.t.Fatalf("verify: %v", err)
	}
	res, err := p.Map(req)
	if err != nil {
		h.t.Fatalf("map: %v", err)
	}
	if len(res.Items) != 1 {
		h.t.Fatalf("mapped %d items, want 1", len(res.Items))
	}
	it := res.Items[0]
	h.publish(it.Subject, it.Envelope, bus.WithMsgID(it.MsgID))
	return it.Envelope
}

// click is a block_actions payload: user clicks action on the approval message ts.
func click(user, action, task, messageTS string) map[string]any {
	trigger := "1700000250." + uuid.NewString()
	return map[string]any{
		"type":         "block_actions",
		"user":         map[string]any{"id": user, "username": "someone", "team_id": team},
		"api_app_id":   "A0APP01",
		"container":    map[string]any{"type": "message", "message_ts": messageTS, "channel_id": approvalCh, "is_ephemeral": false},
		"trigger_id":   trigger,
		"team":         map[string]any{"id": team, "domain": "acme"},
		"channel":      map[string]any{"id": approvalCh, "name": "approvals"},
		"message":      map[string]any{"type": "message", "ts": messageTS, "text": "Approval needed"},
		"state":        map[string]any{"values": map[string]any{}},
		"response_url": "https://hooks.slack.com/actions/" + team + "/1/x",
		"actions": []any{map[string]any{
			"action_id": action, "block_id": approvals.BlockActions, "value": task, "type": "button",
			"text": map[string]any{"type": "plain_text", "text": action}, "action_ts": "1700000250.1",
		}},
	}
}

// submit is a view_submission payload of the modal the worker opened.
func submit(user, callbackID, privateMetadata string, values map[string]any) map[string]any {
	return map[string]any{
		"type":       "view_submission",
		"team":       map[string]any{"id": team, "domain": "acme"},
		"user":       map[string]any{"id": user, "username": "someone", "team_id": team},
		"api_app_id": "A0APP01",
		"trigger_id": "1700000300." + uuid.NewString(),
		"view": map[string]any{
			"id": "V0VIEW01", "team_id": team, "type": "modal", "callback_id": callbackID,
			"private_metadata": privateMetadata, "hash": "1700000301.x", "root_view_id": "V0VIEW01",
			"state": map[string]any{"values": values},
		},
	}
}

func textInput(v string) map[string]any {
	return map[string]any{"type": "plain_text_input", "value": v}
}

// streamMsgs returns the envelopes stored on a relative subject, in order.
func (h *harness) streamMsgs(subject string) []*envelope.Envelope {
	h.t.Helper()
	ctx := h.t.Context()
	js := h.bus.JetStream()
	stream, err := js.Stream(ctx, h.bus.StreamName(subject))
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(h.bus.Subject(subject)))
	if err != nil {
		h.t.Fatal(err)
	}
	n := info.State.Subjects[h.bus.Subject(subject)]
	if n == 0 {
		return nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{h.bus.Subject(subject)}})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []*envelope.Envelope
	for uint64(len(out)) < n {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			h.t.Fatalf("read %s: %v", subject, err)
		}
		e, err := envelope.Parse(msg.Data())
		if err != nil {
			h.t.Fatalf("stored envelope on %s: %v", subject, err)
		}
		out = append(out, e)
	}
	return out
}

// approveDrained clicks Approve as the approver on task's message ts, waits
// until the worker is idle and returns how many envelopes out.github holds.
func (h *harness) approveDrained(task, ts string) int {
	h.t.Helper()
	h.interact(click(approver, approvals.ActionApprove, task, ts))
	h.drained()
	return len(h.streamMsgs("out.github"))
}

// approveUntil clicks Approve as the approver on task's message ts and
// waits (what: for what) until out.github holds n envelopes.
func (h *harness) approveUntil(task, ts string, n int, what string) {
	h.t.Helper()
	h.interact(click(approver, approvals.ActionApprove, task, ts))
	testenv.WaitFor(h.t, 10*time.Second, what, func() bool { return len(h.streamMsgs("out.github")) == n })
}

// drained waits until every consumer of the worker has nothing pending.
func (h *harness) drained() {
	h.t.Helper()
	ctx := h.t.Context()
	for _, c := range []struct{ stream, name string }{
		{h.bus.StreamName("agent.x"), "approvals"},
		{h.bus.StreamName("agent.x"), "approvals-steps"},
		{h.bus.StreamName("in.x"), "approvals-actions"},
		{h.bus.StreamName("in.x"), "approvals-views"},
	} {
		// 30s: a draft that found another handler's live claim to post is
		// retried when that claim would expire (up to 10s later).
		testenv.WaitFor(h.t, 30*time.Second, "consumer "+c.name+" drained", func() bool {
			ok, err := bustest.Drained(ctx, h.bus, c.stream, c.name)
			return err == nil && ok
		})
	}
}

func (h *harness) cfgToken() secret.Value { return secret.New("xoxb-test") }

// msgIDOf is the Nats-Msg-Id of the last message on a relative subject.
func msgIDOf(t testing.TB, h *harness, subject string) string {
	t.Helper()
	stream, err := h.bus.JetStream().Stream(t.Context(), h.bus.StreamName(subject))
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(t.Context(), h.bus.Subject(subject))
	if err != nil {
		t.Fatal(err)
	}
	return m.Header.Get(jetstream.MsgIDHeader)
}
