package ingest_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/ingest"
)

const (
	slackSecret  = "slack-test-secret"
	sentrySecret = "sentry-test-secret"
	opSecret     = "op-test-secret"
)

func readFixture(t *testing.T, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"..", ".."}, parts...)...))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return b
}

// key returns the signing key of a request: secret, or a wrong one.
func key(secret string, sign bool) string {
	if sign {
		return secret
	}
	return "wrong"
}

func slackRequest(base, route, contentType string, body []byte, sign bool) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, base+"/webhooks/slack/"+route, bytes.NewReader(body))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	r.Header.Set("Content-Type", contentType)
	r.Header.Set(slack.HeaderTimestamp, ts)
	r.Header.Set(slack.HeaderSignature, slack.SignatureHeader(key(slackSecret, sign), ts, body))
	return r
}

func sentryRequest(base string, body []byte, sign bool) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, base+"/webhooks/sentry", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(sentry.HeaderResource, "issue")
	r.Header.Set(sentry.HeaderTimestamp, strconv.FormatInt(time.Now().Unix(), 10))
	r.Header.Set(sentry.HeaderSignature, sentry.SignatureHeader(key(sentrySecret, sign), body))
	return r
}

func openProjectRequest(base string, body []byte, sign bool) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, base+"/webhooks/openproject", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(openproject.HeaderSignature, openproject.SignatureHeader(key(opSecret, sign), body))
	return r
}

// allProviders are the four providers with the test secrets.
func allProviders() []mappers.Provider {
	return []mappers.Provider{
		github.New(github.Config{Secret: secret.New(ghSecret)}),
		slack.New(slack.Config{Secret: secret.New(slackSecret)}),
		sentry.New(sentry.Config{Secret: secret.New(sentrySecret)}),
		openproject.New(openproject.Config{Secret: secret.New(opSecret), BaseURL: "https://op.example.com"}),
	}
}

// TestProvidersOverHTTP runs every provider package behind one gateway on a
// real JetStream: each route answers 2xx for a signed real payload (and
// stores the envelope on relay.in.{channel}.*), 401 for a bad signature, and
// Slack's url_verification returns the challenge.
func TestProvidersOverHTTP(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	gw := startGateway(t, b, ingest.Config{}, allProviders()...)
	slackReq := func(route, contentType string, body []byte, sign bool) *http.Request {
		return slackRequest(gw.url, route, contentType, body, sign)
	}
	sentryReq := func(sign bool) *http.Request {
		return sentryRequest(gw.url, readFixture(t, "mappers", "sentry", "testdata", "payloads", "issue.created.json"), sign)
	}
	opReq := func(sign bool) *http.Request {
		return openProjectRequest(gw.url, readFixture(t, "mappers", "openproject", "testdata", "payloads", "work_package.created.json"), sign)
	}
	form := "application/x-www-form-urlencoded"
	var challenge struct{ Challenge string }
	if err := json.Unmarshal(readFixture(t, "mappers", "slack", "testdata", "events", "url_verification.json"), &challenge); err != nil || challenge.Challenge == "" {
		t.Fatalf("url_verification fixture has no challenge: %v", err)
	}
	interaction := []byte("payload=" + url.QueryEscape(string(readFixture(t, "mappers", "slack", "testdata", "interactions", "block_actions_button.json"))))
	cases := []struct {
		name       string
		req        *http.Request
		wantStatus int
		channel    string // stored envelope expected on in.{channel}.>; "" for none
		wantBody   string
	}{
		{"slack event", slackReq("events", "application/json", readFixture(t, "mappers", "slack", "testdata", "events", "app_mention.json"), true), 200, "slack", ""},
		{"slack url_verification", slackReq("events", "application/json", readFixture(t, "mappers", "slack", "testdata", "events", "url_verification.json"), true), 200, "", challenge.Challenge},
		{"slack command", slackReq("commands", form, readFixture(t, "mappers", "slack", "testdata", "commands", "relay_summarize.form"), true), 200, "slack", ""},
		{"slack interaction", slackReq("interactions", form, interaction, true), 200, "slack", ""},
		{"slack bad signature", slackReq("events", "application/json", readFixture(t, "mappers", "slack", "testdata", "events", "app_mention.json"), false), 401, "", ""},
		{"sentry issue", sentryReq(true), 200, "sentry", ""},
		{"sentry bad signature", sentryReq(false), 401, "", ""},
		{"openproject work package", opReq(true), 200, "openproject", ""},
		{"openproject bad signature", opReq(false), 401, "", ""},
	}
	stored := map[string]int{}
	for _, c := range cases {
		code, body := do(t, c.req)
		if code != c.wantStatus {
			t.Errorf("%s: got %d %q, want %d", c.name, code, body, c.wantStatus)
		}
		if c.wantBody != "" && !strings.Contains(body, c.wantBody) {
			t.Errorf("%s: got body %q, want it to contain %q", c.name, body, c.wantBody)
		}
		if c.channel != "" {
			stored[c.channel]++
		}
	}
	checkStored(t, b, stored)
}

// checkStored checks the inbound stream holds the last envelope of every
// channel in stored, with its channel and a thread, and at least as many
// messages as stored counts.
func checkStored(t *testing.T, b *bus.Bus, stored map[string]int) {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), b.StreamName("in.x"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for ch, n := range stored {
		total += n
		m, err := s.GetLastMsgForSubject(t.Context(), b.Subject("in."+ch+".>"))
		if err != nil {
			t.Errorf("no envelope on in.%s.>: %v", ch, err)
			continue
		}
		e, err := envelope.Parse(m.Data)
		if err != nil {
			t.Errorf("envelope on %s: %v", m.Subject, err)
			continue
		}
		if string(e.Channel) != ch || e.Meta.Thread == "" {
			t.Errorf("envelope on %s: channel %q thread %q, want channel %s and a thread", m.Subject, e.Channel, e.Meta.Thread, ch)
		}
	}
	if got := storedIn(t, b); got < uint64(total) {
		t.Errorf("inbound stream holds %d messages, want at least %d", got, total)
	}
}
