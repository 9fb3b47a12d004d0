package sentry_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/secret"
)

const testSecret = "b6c2a1e0f9d84c7ab2f3e4d5c6b7a8f9"

var received = mapperstest.Received

func newProvider(org string) *sentry.Provider {
	return sentry.New(sentry.Config{Secret: secret.New(testSecret), Org: org, Now: func() time.Time { return received }})
}

func signed(resource string, body []byte) *mappers.Request {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(sentry.HeaderResource, resource)
	h.Set(sentry.HeaderSignature, sentry.SignatureHeader(testSecret, body))
	return &mappers.Request{Header: h, Body: body, Received: received}
}

// payload reads testdata/payloads/{resource}.{name}.json; the resource is the
// file name up to the first dot.
func payload(t testing.TB, file string) (resource string, body []byte) {
	t.Helper()
	return mapperstest.Stem(file), testenv.ReadFile(t, filepath.Join("testdata", "payloads", file))
}

func TestGolden(t *testing.T) {
	t.Parallel()
	p := newProvider("test-org")
	for _, pl := range mapperstest.Payloads(t, filepath.Join("testdata", "payloads", "*.json")) {
		t.Run(pl.Name, func(t *testing.T) {
			t.Parallel()
			resource := pl.Stem()
			golden := filepath.Join("testdata", "golden", pl.Name)
			doc := mapperstest.GoldenDoc(t, p, signed(resource, pl.Body), golden)
			if len(doc.Items) != 1 {
				t.Fatalf("golden %s has %d items, want 1", golden, len(doc.Items))
			}
			// The identity names the resource the signed body is about;
			// resources this package does not know are "other".
			idResource := resource
			if resource == "seer" {
				idResource = "other"
			}
			mapperstest.CheckGoldenItems(t, golden, doc, "in.sentry."+resource, "sentry:"+idResource+":")
		})
	}
}

func TestMapping(t *testing.T) {
	t.Parallel()
	const install = "a8e5d37a-696c-4c54-adb5-b3f28d64c7de"
	tests := []struct {
		file, org        string
		thread, content  string
		role             envelope.Role
		url, actor, stem string
	}{
		{file: "issue.created.json", org: "test-org", thread: "sentry:test-org/1170820242",
			content: "Sentry issue FRONT-END-9 'ReferenceError: blooopy is not defined' was created in project front-end",
			role:    envelope.RoleUser, url: "https://sentry.io/organizations/test-org/issues/1170820242/", actor: "Sentry",
			stem: "sentry:issue:created:1170820242:"},
		{file: "issue.resolved.json", org: "test-org", thread: "sentry:test-org/1170820242",
			content: "was resolved by Colleen O'Reilly", role: envelope.RoleUser, actor: "Colleen O'Reilly"},
		{file: "issue.assigned.json", org: "test-org", thread: "sentry:test-org/1170820242",
			content: "was assigned to Meredith Heller by colleen", role: envelope.RoleUser},
		{file: "error.created.json", org: "test-org", thread: "sentry:test-org/1170820242",
			content: "Sentry error in issue 1170820242 created: ReferenceError: blooopy is not defined", role: envelope.RoleUser,
			stem: "sentry:error:created:bb78c1407cea4519aa397afc059c793d:"},
		{file: "comment.on_issue_1170820242.json", org: "test-org", thread: "sentry:test-org/1170820242",
			content: "colleen commented on Sentry issue 1170820242 in project front-end: Looks like", role: envelope.RoleUser,
			stem: "sentry:comment:created:4567:"},
		{file: "event_alert.triggered.json", org: "test-org", thread: "sentry:test-org/1117540176",
			content: "Sentry alert rule 'Very Important Alert Rule!' triggered for issue 1117540176: ReferenceError: heck is not defined",
			role:    envelope.RoleUser},
		{file: "metric_alert.critical.json", org: "test-org", thread: "sentry:test-org/incident-4",
			content: "Sentry metric alert 'Too many errors' is critical", role: envelope.RoleUser},
		{file: "metric_alert.resolved.json", org: "test-org", thread: "sentry:test-org/incident-4",
			content: "is resolved: Resolved: Too many errors", role: envelope.RoleUser, url: "https://sentry.io/organizations/baz/alerts/1/"},
		{file: "installation.created.json", org: "test-org",
			content: "Meredith Heller installed the Sentry integration webhooks-galore in organization test-org", role: envelope.RoleSystem},
		{file: "seer.root_cause_started.json", org: "test-org", thread: "sentry:test-org/1170820242",
			content: "Sentry seer created by Sentry for issue 1170820242", role: envelope.RoleUser},
		{file: "issue.created.json", thread: "sentry:" + install + "/1170820242", content: "FRONT-END-9", role: envelope.RoleUser},
		{file: "comment.on_issue_1170820242.json", thread: "sentry:" + install + "/1170820242", content: "commented", role: envelope.RoleUser},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/org="+tt.org, func(t *testing.T) {
			t.Parallel()
			resource, body := payload(t, tt.file)
			it := mapperstest.MapOne(t, newProvider(tt.org), signed(resource, body))
			src := mapperstest.CheckMapped(t, it, mapperstest.Mapped{Thread: tt.thread, Content: tt.content,
				Role: tt.role, Channel: envelope.ChannelSentry, URL: tt.url, Actor: tt.actor})
			if src.Event != resource || src.DeliveryID != it.MsgID {
				t.Errorf("got source %+v, want event %q and delivery id %q", src, resource, it.MsgID)
			}
			if tt.stem != "" && !strings.HasPrefix(it.MsgID, tt.stem) {
				t.Errorf("got msg id %q, want prefix %q", it.MsgID, tt.stem)
			}
		})
	}
}

func TestDeliveryIdentity(t *testing.T) {
	t.Parallel()
	p := newProvider("test-org")
	_, created := payload(t, "issue.created.json")
	_, resolved := payload(t, "issue.resolved.json")
	first, err := p.Map(signed("issue", created))
	if err != nil {
		t.Fatal(err)
	}
	// A redelivery: same bytes, a new Request-ID.
	again := signed("issue", created)
	again.Header.Set(sentry.HeaderRequestID, "4b8f1b1e-1a7e-4a39-9d8e-000000000002")
	second, err := p.Map(again)
	if err != nil {
		t.Fatal(err)
	}
	other, err := p.Map(signed("issue", resolved))
	if err != nil {
		t.Fatal(err)
	}
	if first.Items[0].MsgID != second.Items[0].MsgID {
		t.Errorf("got %q and %q for one webhook, want the same identity", first.Items[0].MsgID, second.Items[0].MsgID)
	}
	if first.Items[0].MsgID == other.Items[0].MsgID {
		t.Errorf("created and resolved share identity %q", first.Items[0].MsgID)
	}
	if first.Items[0].Envelope.Meta.Thread != other.Items[0].Envelope.Meta.Thread {
		t.Error("created and resolved are in different threads")
	}
}

func TestMapRejectsBadBodies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, resource, body string
	}{
		{"no resource header", "", `{"action":"created","data":{}}`},
		{"not json", "issue", "{"},
		{"json array", "issue", "[]"},
		{"data not an object", "issue", `{"action":"created","data":[1]}`},
		{"issue without data", "issue", `{"action":"created"}`},
		{"issue without id", "issue", `{"action":"created","data":{"issue":{"title":"x"}}}`},
		{"issue id of wrong type", "issue", `{"action":"created","data":{"issue":{"id":{}}}}`},
		{"event alert without event", "event_alert", `{"action":"triggered","data":{}}`},
		{"error without error", "error", `{"action":"created","data":{"x":1}}`},
		{"metric alert without id", "metric_alert", `{"action":"critical","data":{"metric_alert":{}}}`},
		{"comment without issue", "comment", `{"action":"created","data":{"comment":"hi"}}`},
		{"installation without installation", "installation", `{"action":"created","data":{}}`},
	}
	p := newProvider("test-org")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := p.Map(signed(tt.resource, []byte(tt.body)))
			mapperstest.CheckParseError(t, "sentry", err)
		})
	}
}
