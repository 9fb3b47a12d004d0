package slack_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
)

const testSecret = "8f742231b10e8888abcd99yyyzzz85a5"

// received is the fixed receive time of every golden request.
var received = mapperstest.Received

func newProvider() *slack.Provider {
	return slack.New(slack.Config{Secret: secret.New(testSecret), Now: func() time.Time { return received }})
}

// signed builds a request for route with body, signed at received.
func signed(route string, body []byte) *mappers.Request {
	ts := strconv.FormatInt(received.Unix(), 10)
	h := http.Header{}
	h.Set(slack.HeaderTimestamp, ts)
	h.Set(slack.HeaderSignature, slack.SignatureHeader(testSecret, ts, body))
	return &mappers.Request{Route: route, Header: h, Body: body, Received: received}
}

// body reads a payload file and shapes it as Slack sends it on route.
func body(t testing.TB, route, path string) []byte {
	t.Helper()
	raw := testenv.ReadFile(t, path)
	if route == slack.RouteInteractions {
		var c bytes.Buffer
		if err := json.Compact(&c, raw); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return []byte("payload=" + url.QueryEscape(c.String()))
	}
	return raw
}

func TestGolden(t *testing.T) {
	t.Parallel()
	p := newProvider()
	for _, route := range []string{slack.RouteEvents, slack.RouteCommands, slack.RouteInteractions} {
		for _, pl := range mapperstest.Payloads(t, filepath.Join("testdata", route, "*")) {
			name := strings.TrimSuffix(pl.Name, filepath.Ext(pl.Name))
			t.Run(route+"/"+name, func(t *testing.T) {
				t.Parallel()
				golden := filepath.Join("testdata", "golden", route, name+".json")
				doc := mapperstest.GoldenDoc(t, p, signed(route, body(t, route, pl.Path)), golden)
				if len(doc.Items) == 0 && doc.Reply == nil {
					t.Errorf("golden %s has neither items nor a reply", golden)
				}
				mapperstest.CheckGoldenItems(t, golden, doc, "in.slack.", "slack:")
			})
		}
	}
}

// mapOne maps one payload file and returns its only item.
func mapOne(t *testing.T, route, file string, mutate func(*mappers.Request)) mappers.Item {
	t.Helper()
	r := signed(route, body(t, route, filepath.Join("testdata", route, file)))
	if mutate != nil {
		mutate(r)
	}
	return mapperstest.MapOne(t, newProvider(), r)
}

func slackMeta(t *testing.T, e *envelope.Envelope) map[string]any {
	t.Helper()
	v, ok := e.Meta.Get(slack.MetaKey)
	if !ok {
		t.Fatal("no meta.slack")
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("meta.slack is %T", v)
	}
	return m
}

// mappingCase is one payload of TestMapping and what its envelope must be.
type mappingCase struct {
	route, file        string
	subject, thread    string
	msgID, content     string
	bot, edit, self    bool
	role               envelope.Role
	task, sourceAction string
}

func TestMapping(t *testing.T) {
	t.Parallel()
	tests := []mappingCase{
		{route: "events", file: "app_mention.json", subject: "in.slack.app_mention",
			thread: "slack:T123ABC456/C123ABC456/1515449522.000016", msgID: "slack:T123ABC456:Ev123ABC456",
			content: "<@U123ABC456> mentioned the app in <#C123ABC456>: What is the hour of the pearl", role: envelope.RoleUser},
		{route: "events", file: "app_mention_in_thread.json", subject: "in.slack.app_mention",
			thread: "slack:T123ABC456/C0LAN2Q65/1700000000.000100", msgID: "slack:T123ABC456:Ev06ABCDE12", role: envelope.RoleUser},
		{route: "events", file: "message.json", subject: "in.slack.message",
			thread: "slack:T061EG9R6/C024BE91L/1355517523.000005", msgID: "slack:T061EG9R6:Ev0PV52K21",
			content: "<@U2147483697> wrote in <#C024BE91L>: Live long and prospect.", role: envelope.RoleUser},
		{route: "events", file: "message_changed.json", subject: "in.slack.message", edit: true,
			thread: "slack:T061EG9R6/G024BE91L/1355517523.000005", msgID: "slack:T061EG9R6:Ev0PV52K22",
			content: "edited a message", role: envelope.RoleUser, sourceAction: "message_changed"},
		{route: "events", file: "bot_message.json", subject: "in.slack.message", bot: true,
			thread: "slack:T061EG9R6/C024BE91L/1358877455.000010", content: "bot github wrote", role: envelope.RoleUser},
		{route: "events", file: "message_from_app.json", subject: "in.slack.message", bot: true, self: true,
			thread: "slack:T123ABC456/C0LAN2Q65/1700000000.000100", content: "bot relay wrote", role: envelope.RoleUser},
		{route: "events", file: "app_rate_limited.json", subject: "in.slack.app_rate_limited", role: envelope.RoleSystem},
		{route: "events", file: "unknown_future_event.json", subject: "in.slack.relay_future_event", role: envelope.RoleUser,
			msgID: "slack:T061EG9R6:Ev0PV52K27"},
		{route: "commands", file: "weather.form", subject: "in.slack.command",
			thread:  "slack:T0001/C2147483705/cmd-13345224609.738474920.8088930838d88f008e0",
			msgID:   "slack:T0001:command:13345224609.738474920.8088930838d88f008e0",
			content: "<@U2147483697> ran /weather 94070 in <#C2147483705>", role: envelope.RoleUser, sourceAction: "/weather"},
		{route: "interactions", file: "block_actions_approve_in_thread.json", subject: "in.slack.block_actions",
			thread:  "slack:T123ABC456/C0LAN2Q65/1700000000.000100",
			msgID:   "slack:T123ABC456:block_actions:1700000250.123456789.0f0e0d0c0b0a09080706050403020100",
			content: "<@U061F7AUR> chose Approve (approve) = sugg-7f3c in <#C0LAN2Q65>", role: envelope.RoleUser, sourceAction: "approve"},
		{route: "interactions", file: "view_submission_edit_suggestion.json", subject: "in.slack.view_submission",
			thread: "slack:T123ABC456/C0LAN2Q65/1700000000.000100", task: "task-7f3c",
			content: "reply.text = The login fails", role: envelope.RoleUser, sourceAction: "edit_suggestion"},
		{route: "interactions", file: "shortcut.json", subject: "in.slack.shortcut",
			msgID: "slack:TXXXXXXXX:shortcut:944799105734.773906753841.38b5894552bdd4a780554ee59d1f3638", role: envelope.RoleUser},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			tt.check(t, mapOne(t, tt.route, tt.file, nil))
		})
	}
}

// check compares the mapped item with the case.
func (tt mappingCase) check(t *testing.T, it mappers.Item) {
	t.Helper()
	e := it.Envelope
	if it.Subject != tt.subject {
		t.Errorf("got subject %q, want %q", it.Subject, tt.subject)
	}
	src := mapperstest.CheckMapped(t, it, mapperstest.Mapped{Thread: tt.thread, Content: tt.content,
		Role: tt.role, Channel: envelope.ChannelSlack, MsgID: tt.msgID})
	if e.Meta.TaskID != tt.task {
		t.Errorf("got task %q, want %q", e.Meta.TaskID, tt.task)
	}
	if e.Meta.MCPVersion != envelope.Version {
		t.Errorf("got mcp_version %q, want %q", e.Meta.MCPVersion, envelope.Version)
	}
	if tt.sourceAction != "" && src.Action != tt.sourceAction {
		t.Errorf("got source action %q, want %q", src.Action, tt.sourceAction)
	}
	m := slackMeta(t, e)
	if m["bot"] != tt.bot || m["edit"] != tt.edit {
		t.Errorf("got bot=%v edit=%v, want %v %v", m["bot"], m["edit"], tt.bot, tt.edit)
	}
	if self, _ := m["self"].(bool); self != tt.self {
		t.Errorf("got self=%v, want %v", m["self"], tt.self)
	}
}

// TestOwnPostIsTheAppsOwn: a bot message is the relay's own post (meta.slack
// self) only when the app that posted it is the app the event is for; another
// app's bot message is a bot message.
func TestOwnPostIsTheAppsOwn(t *testing.T) {
	t.Parallel()
	raw := body(t, "events", filepath.Join("testdata", "events", "message_from_app.json"))
	other := bytes.ReplaceAll(raw, []byte(`"app_id": "A123ABC456"`), []byte(`"app_id": "A0OTHERAPP"`))
	if bytes.Equal(other, raw) {
		t.Fatal("fixture has no app_id to change")
	}
	m := slackMeta(t, mapperstest.MapOne(t, newProvider(), signed("events", other)).Envelope)
	if m["bot"] != true || m["self"] != nil || m["app_id"] != "A0OTHERAPP" {
		t.Errorf("another app's message: got bot=%v self=%v app_id=%v, want a bot message of A0OTHERAPP, not self", m["bot"], m["self"], m["app_id"])
	}
}

func TestInteractionMetaForApprovals(t *testing.T) {
	t.Parallel()
	m := slackMeta(t, mapOne(t, "interactions", "block_actions_approve_in_thread.json", nil).Envelope)
	for k, want := range map[string]string{
		"user":         "U061F7AUR",
		"channel":      "C0LAN2Q65",
		"message_ts":   "1700000200.000300",
		"thread_ts":    "1700000000.000100",
		"response_url": "https://hooks.slack.com/actions/T123ABC456/6123456789012/abcdEFGHijklMNOPqrstUVWX",
		"trigger_id":   "1700000250.123456789.0f0e0d0c0b0a09080706050403020100",
	} {
		if got, _ := m[k].(string); got != want {
			t.Errorf("got meta.slack.%s %q, want %q", k, got, want)
		}
	}
	acts, ok := m["actions"].([]any)
	if !ok || len(acts) != 1 {
		t.Fatalf("got actions %#v, want one", m["actions"])
	}
	a := acts[0].(map[string]any)
	if a["action_id"] != "approve" || a["value"] != "sugg-7f3c" || a["block_id"] != "approval" {
		t.Errorf("got action %v", a)
	}

	v := slackMeta(t, mapOne(t, "interactions", "view_submission_edit_suggestion.json", nil).Envelope)
	view, ok := v["view"].(map[string]any)
	if !ok {
		t.Fatalf("no view in %v", v)
	}
	if view["callback_id"] != "edit_suggestion" || !strings.Contains(view["private_metadata"].(string), "sugg-7f3c") {
		t.Errorf("got view %v", view)
	}
	state := view["state"].(map[string]any)["reply"].(map[string]any)["text"]
	if !strings.HasPrefix(state.(string), "The login fails") {
		t.Errorf("got state value %v", state)
	}
}

func TestURLVerificationRepliesAndPublishesNothing(t *testing.T) {
	t.Parallel()
	r := signed("events", body(t, "events", "testdata/events/url_verification.json"))
	res, err := newProvider().Map(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Items) != 0 {
		t.Errorf("got %d items, want none", len(res.Items))
	}
	if res.Reply == nil || res.Reply.Status != http.StatusOK ||
		string(res.Reply.Body) != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Errorf("got reply %+v, want the challenge", res.Reply)
	}
}

func TestRetryKeepsDeliveryIdentity(t *testing.T) {
	t.Parallel()
	first := mapOne(t, "events", "message.json", nil)
	retry := mapOne(t, "events", "message.json", func(r *mappers.Request) {
		r.Header.Set("X-Slack-Retry-Num", "1")
		r.Header.Set("X-Slack-Retry-Reason", "http_timeout")
	})
	if first.MsgID != retry.MsgID {
		t.Errorf("got msg ids %q and %q, want one identity across retries", first.MsgID, retry.MsgID)
	}
	if first.Envelope.ID == retry.Envelope.ID {
		t.Error("two mappings share an envelope id")
	}
	if got := slackMeta(t, retry.Envelope)["retry_num"]; got != "1" {
		t.Errorf("got retry_num %v, want 1", got)
	}
}

func TestMapRejectsBadBodies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, route, body string
	}{
		{"not json", "events", "{"},
		{"no type", "events", `{"team_id":"T1"}`},
		{"unknown outer type", "events", `{"type":"nope"}`},
		{"challenge missing", "events", `{"type":"url_verification"}`},
		{"callback without event", "events", `{"type":"event_callback","team_id":"T1","event_id":"E1"}`},
		{"callback with null event", "events", `{"type":"event_callback","event":null}`},
		{"event without type", "events", `{"type":"event_callback","event":{"user":"U1"}}`},
		{"event field of wrong type", "events", `{"type":"event_callback","event":{"type":"message","text":5}}`},
		{"command form broken", "commands", "command=%zz"},
		{"command missing", "commands", "team_id=T1&user_id=U1"},
		{"no payload field", "interactions", "foo=bar"},
		{"payload not json", "interactions", "payload=%7Bnope"},
		{"payload without type", "interactions", "payload=%7B%7D"},
		{"unknown route", "webhooks", "{}"},
	}
	p := newProvider()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := p.Map(signed(tt.route, []byte(tt.body)))
			mapperstest.CheckParseError(t, "slack", err)
		})
	}
}
