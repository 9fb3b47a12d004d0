package github_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	gh "github.com/google/go-github/v60/github"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/secret"
)

const testSecret = "It's a Secret to Everybody"

// received is the fixed receive time of golden requests; envelopes take their
// timestamp from it.
var received = mapperstest.Received

func newProvider() *github.Provider {
	return github.New(github.Config{Secret: secret.New(testSecret)})
}

func request(event, delivery string, body []byte) *mappers.Request {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	github.SetHeaders(h, event, delivery, "123456", github.Sign([]byte(testSecret), body))
	return &mappers.Request{Header: h, Body: body, Received: received}
}

// TestGolden maps every payload in testdata/payloads and compares the result
// with testdata/golden (go test -update rewrites them). Every golden envelope
// must validate against the schema.
func TestGolden(t *testing.T) {
	t.Parallel()
	p := newProvider()
	for _, pl := range mapperstest.Payloads(t, "testdata/payloads/*.json") {
		name := strings.TrimSuffix(pl.Name, ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := request(pl.Stem(), "delivery-"+name, pl.Body)
			mapperstest.GoldenItem(t, p, r, filepath.Join("testdata", "golden", name+".json"))
		})
	}
}

// TestOctokitExamples maps every example of @octokit/webhooks-examples: each
// gives one schema-valid envelope on in.github.{event} with the thread of its
// issue, pull request or discussion and the payload's action.
func TestOctokitExamples(t *testing.T) {
	t.Parallel()
	p := newProvider()
	exs := mapperstest.OctokitExamples(t)
	if len(exs) < 300 {
		t.Fatalf("got %d examples, want the whole api.github.com set (300+)", len(exs))
	}
	for i, ex := range exs {
		r := request(ex.Event, "d", ex.Payload)
		res, err := p.Map(r)
		if err != nil {
			t.Errorf("example %d (%s): Map: %v", i, ex.Event, err)
			continue
		}
		if len(res.Items) != 1 {
			t.Errorf("example %d (%s): got %d items, want 1", i, ex.Event, len(res.Items))
			continue
		}
		it := res.Items[0]
		if want := "in.github." + ex.Event; it.Subject != want {
			t.Errorf("example %d: subject %q, want %q", i, it.Subject, want)
		}
		if err := envelope.Validate(it.Envelope); err != nil {
			t.Errorf("example %d (%s): %v", i, ex.Event, err)
		}
		thread, action := mapperstest.GitHubThread(t, ex.Event, ex.Payload)
		if it.Envelope.Meta.Thread != thread {
			t.Errorf("example %d (%s): thread %q, want %q", i, ex.Event, it.Envelope.Meta.Thread, thread)
		}
		if got := it.Envelope.Meta.Source.Action; got != action {
			t.Errorf("example %d (%s): action %q, want %q", i, ex.Event, got, action)
		}
		if it.Envelope.Content == "" || strings.Contains(it.Envelope.Content, "%!") {
			t.Errorf("example %d (%s): content %q", i, ex.Event, it.Envelope.Content)
		}
		wantRole := envelope.RoleUser
		if ex.Event == "ping" {
			wantRole = envelope.RoleSystem
		}
		if it.Envelope.Role != wantRole {
			t.Errorf("example %d (%s): role %q, want %q", i, ex.Event, it.Envelope.Role, wantRole)
		}
	}
}

// TestSameThread checks that every event about one issue or pull request,
// whatever its type, lands in that conversation's thread.
func TestSameThread(t *testing.T) {
	t.Parallel()
	p := newProvider()
	cases := []struct {
		name, event, body string
	}{
		{"issue opened", "issues", `{"action":"opened","issue":{"number":7,"title":"t"},"repository":{"full_name":"o/r"}}`},
		{"issue comment", "issue_comment", `{"action":"created","issue":{"number":7},"comment":{"body":"hi"},"repository":{"full_name":"o/r"}}`},
		{"pr comment as issue comment", "issue_comment", `{"action":"created","issue":{"number":7,"pull_request":{}},"comment":{"body":"x"},"repository":{"full_name":"o/r"}}`},
		{"pull request", "pull_request", `{"action":"opened","number":7,"pull_request":{"number":7},"repository":{"full_name":"o/r"}}`},
		{"review", "pull_request_review", `{"action":"submitted","review":{"state":"approved"},"pull_request":{"number":7},"repository":{"full_name":"o/r"}}`},
		{"review comment", "pull_request_review_comment", `{"action":"created","comment":{"path":"a.go"},"pull_request":{"number":7},"repository":{"full_name":"o/r"}}`},
		{"check run on the PR", "check_run", `{"action":"completed","check_run":{"name":"ci","pull_requests":[{"number":7}]},"repository":{"full_name":"o/r"}}`},
		{"workflow run on the PR", "workflow_run", `{"action":"completed","workflow_run":{"pull_requests":[{"number":7}]},"repository":{"full_name":"o/r"}}`},
		{"unknown event type", "future_event", `{"action":"x","pull_request":{"number":7},"repository":{"full_name":"o/r"}}`},
	}
	want := envelope.GitHubThread("o", "r", 7)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := p.Map(request(tc.event, "d", []byte(tc.body)))
			if err != nil {
				t.Fatalf("Map: %v", err)
			}
			if got := res.Items[0].Envelope.Meta.Thread; got != want {
				t.Errorf("got thread %q, want %q", got, want)
			}
			if err := envelope.Validate(res.Items[0].Envelope); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestMapDetails(t *testing.T) {
	t.Parallel()
	p := github.New(github.Config{Secret: secret.New(testSecret), MaxContent: 50})
	long := strings.Repeat("é", 200)
	body := []byte(`{"action":"opened","issue":{"number":3,"title":"Crash","body":"` + long + `","html_url":"https://github.com/o/r/issues/3"},` +
		`"repository":{"full_name":"o/r","html_url":"https://github.com/o/r"},"sender":{"login":"dependabot[bot]","type":"Bot"}}`)
	r := request("issues", "guid-1", body)
	res, err := p.Map(r)
	if err != nil {
		t.Fatal(err)
	}
	it := res.Items[0]
	e := it.Envelope
	if it.MsgID != "github:123456:guid-1" {
		t.Errorf("got msg id %q, want github:123456:guid-1", it.MsgID)
	}
	wantSrc := envelope.Source{Event: "issues", Action: "opened", DeliveryID: "guid-1", URL: "https://github.com/o/r/issues/3", Actor: "dependabot[bot]"}
	if *e.Meta.Source != wantSrc {
		t.Errorf("got source %+v, want %+v", *e.Meta.Source, wantSrc)
	}
	if bot, _ := e.Meta.Get("bot"); bot != true {
		t.Errorf("got meta.bot %v, want true for a Bot sender", bot)
	}
	if !e.Timestamp.Equal(received) {
		t.Errorf("got timestamp %s, want the receive time %s", e.Timestamp, received)
	}
	if !strings.HasPrefix(e.Content, "dependabot[bot] opened issue #3 in o/r: Crash\n\n") || !strings.HasSuffix(e.Content, "…") {
		t.Errorf("got content %q", e.Content)
	}
	if n := len(e.Content) - len("dependabot[bot] opened issue #3 in o/r: Crash\n\n"); n > 50+len("…") {
		t.Errorf("body of %d bytes in content, want at most 50 + marker", n)
	}
	if e.Meta.Budget == nil || e.Meta.Budget.Tokens == 0 {
		t.Errorf("got budget %+v, want a token estimate", e.Meta.Budget)
	}

	// The same payload as a form body (payload=...) maps the same way.
	form := []byte("payload=" + url.QueryEscape(string(body)))
	fr := request("issues", "guid-1", form)
	fr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if err := p.Verify(fr); err != nil {
		t.Fatalf("Verify form body: %v", err)
	}
	fres, err := p.Map(fr)
	if err != nil {
		t.Fatalf("Map form body: %v", err)
	}
	if fres.Items[0].Envelope.Content != e.Content {
		t.Errorf("form body content %q, want %q", fres.Items[0].Envelope.Content, e.Content)
	}

	// Without a delivery id the identity is the body's hash: stable across retries.
	nr := request("issues", "", body)
	a, _ := p.Map(nr)
	b, _ := p.Map(nr)
	if a.Items[0].MsgID != b.Items[0].MsgID || !strings.HasPrefix(a.Items[0].MsgID, "github:123456:sha256:") {
		t.Errorf("got msg ids %q and %q, want equal body-hash ids", a.Items[0].MsgID, b.Items[0].MsgID)
	}
}

func TestMapParseErrors(t *testing.T) {
	t.Parallel()
	p := newProvider()
	cases := []struct {
		name, event, body string
	}{
		{"not JSON", "issues", `{"action":`},
		{"JSON array", "issues", `[1,2]`},
		{"JSON null", "issues", `null`},
		{"empty", "issues", ``},
		{"unknown event, not JSON", "brand_new", `{nope`},
		{"no event header", "", `{}`},
		{"event header too long", strings.Repeat("x", 200), `{}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := p.Map(request(tc.event, "d", []byte(tc.body)))
			mapperstest.CheckParseError(t, "github", err)
		})
	}
}

// TestTypedFallback: a payload go-github cannot decode into its typed event
// (a field of another JSON type) is still mapped, generically.
func TestTypedFallback(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"opened","issue":{"number":9,"title":["not","a","string"]},"repository":{"full_name":"o/r"},"sender":{"login":"a"}}`)
	if _, err := gh.ParseWebHook("issues", body); err == nil {
		t.Fatal("go-github decoded the mismatched payload; the test needs one it cannot decode")
	}
	res, err := newProvider().Map(request("issues", "d", body))
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	if got, want := res.Items[0].Envelope.Meta.Thread, "github:o/r#9"; got != want {
		t.Errorf("got thread %q, want %q", got, want)
	}
}

// TestLongOwnCommentKeepsMarker: a comment the relay posted (it ends with
// the hidden marker) that is longer than MaxContent comes back with the
// marker still in the content, so the agent and the hooks know it as the
// relay's own.
func TestLongOwnCommentKeepsMarker(t *testing.T) {
	t.Parallel()
	p := github.New(github.Config{Secret: secret.New(testSecret), MaxContent: 50})
	posted := mappers.WithMarker(strings.Repeat("long answer ", 40), "out:task-1")
	payload, err := json.Marshal(map[string]any{
		"action":     "created",
		"issue":      map[string]any{"number": 3, "title": "Crash"},
		"comment":    map[string]any{"body": posted, "html_url": "https://github.com/o/r/issues/3#issuecomment-1"},
		"repository": map[string]any{"full_name": "o/r"},
		"sender":     map[string]any{"login": "relay-user", "type": "User"},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Map(request("issue_comment", "guid-2", payload))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Items[0].Envelope.Content; !strings.Contains(got, mappers.Marker("out:task-1")) {
		t.Errorf("got content %q, want the relay's marker kept", got)
	}
}
