package openproject_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/secret"
)

const (
	testSecret = "op-webhook-secret-0123456789"
	baseURL    = "https://openproject.example.com"
)

var received = mapperstest.Received

func newProvider(t testing.TB, base string) *openproject.Provider {
	t.Helper()
	cfg := openproject.Config{Secret: secret.New(testSecret), BaseURL: base, Now: func() time.Time { return received }}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return openproject.New(cfg)
}

func signed(body []byte) *mappers.Request {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(openproject.HeaderSignature, openproject.SignatureHeader(testSecret, body))
	return &mappers.Request{Header: h, Body: body, Received: received}
}

func payload(t testing.TB, file string) []byte {
	t.Helper()
	return testenv.ReadFile(t, filepath.Join("testdata", "payloads", file))
}

func TestGolden(t *testing.T) {
	t.Parallel()
	p := newProvider(t, baseURL)
	for _, pl := range mapperstest.Payloads(t, filepath.Join("testdata", "payloads", "*.json")) {
		t.Run(pl.Name, func(t *testing.T) {
			t.Parallel()
			golden := filepath.Join("testdata", "golden", pl.Name)
			doc := mapperstest.GoldenDoc(t, p, signed(pl.Body), golden)
			if len(doc.Items) != 1 {
				t.Fatalf("golden %s has %d items, want 1", golden, len(doc.Items))
			}
			event := pl.Stem()
			mapperstest.CheckGoldenItems(t, golden, doc, "in.openproject."+event, "openproject:"+event+":")
		})
	}
}

func TestMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file, base             string
		thread, content, msgID string
		url, actor             string
	}{
		{file: "work_package.created.json", base: baseURL,
			thread:  "openproject:openproject.example.com/work_packages/1528",
			content: "OpenProject Admin created work package #1528 'Develop API' (Task, New, assignee Emmie Okuneva) in project A Test Project: Develop super cool OpenProject API.",
			msgID:   "openproject:work_package:created:work_package:1528:v0",
			url:     baseURL + "/work_packages/1528", actor: "OpenProject Admin"},
		{file: "work_package.updated.json", base: baseURL,
			thread:  "openproject:openproject.example.com/work_packages/1528",
			content: "work package #1528 'Develop API' was updated (Task, In progress",
			msgID:   "openproject:work_package:updated:work_package:1528:v3"},
		{file: "work_package_comment.comment.json", base: baseURL,
			thread:  "openproject:openproject.example.com/work_packages/207",
			content: "Han Solo commented on work package #207 'Recover Death Star blueprints': I can give you a CR70 corvette",
			msgID:   "openproject:work_package_comment:comment:activity:1478",
			url:     baseURL + "/work_packages/207/activity", actor: "Han Solo"},
		{file: "time_entry.created.json", base: baseURL,
			thread:  "openproject:openproject.example.com/work_packages/207",
			content: "Han Solo logged PT2H30M on work package #207 'Recover Death Star blueprints' for 2025-04-17 (Development): Reviewed",
			msgID:   "openproject:time_entry:created:time_entry:42:2025-04-17T15:02:11.121Z"},
		{file: "attachment.created.json", base: baseURL,
			thread:  "openproject:openproject.example.com/work_packages/207",
			content: "Han Solo attached death-star-plans.pdf (application/pdf, 2097152 bytes) to work package #207 'Recover Death Star blueprints'",
			msgID:   "openproject:attachment:created:attachment:5001"},
		{file: "project.created.json", base: baseURL,
			content: "project 'Project example' (project_example) was created: Lorem **ipsum** dolor sit amet",
			url:     baseURL + "/projects/project_example"},
		{file: "work_package.created.json", thread: "openproject:openproject/work_packages/1528", content: "created work package #1528"},
		{file: "work_package_comment.comment.json", thread: "openproject:openproject/work_packages/207", content: "commented"},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/base="+tt.base, func(t *testing.T) {
			t.Parallel()
			it := mapperstest.MapOne(t, newProvider(t, tt.base), signed(payload(t, tt.file)))
			src := mapperstest.CheckMapped(t, it, mapperstest.Mapped{Thread: tt.thread, Content: tt.content,
				Role: envelope.RoleUser, Channel: envelope.ChannelOpenProject, MsgID: tt.msgID, URL: tt.url, Actor: tt.actor})
			if src.DeliveryID != it.MsgID {
				t.Errorf("got source %+v, want delivery id %q", src, it.MsgID)
			}
			if tt.base == "" && src.URL != "" {
				t.Errorf("got url %q without a base URL, want none", src.URL)
			}
		})
	}
}

func TestHostFromAbsoluteLinks(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"work_package:updated","work_package":{"_type":"WorkPackage","id":42,"lockVersion":7,"subject":"Fix login",` +
		`"_links":{"self":{"href":"https://op.internal:8443/api/v3/work_packages/42","title":"Fix login"}}}}`)
	res, err := newProvider(t, "").Map(signed(body))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Items[0].Envelope.Meta.Thread, "openproject:op.internal:8443/work_packages/42"; got != want {
		t.Errorf("got thread %q, want %q", got, want)
	}
	// A configured base URL wins over the links.
	res, err = newProvider(t, baseURL).Map(signed(body))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Items[0].Envelope.Meta.Thread, "openproject:openproject.example.com/work_packages/42"; got != want {
		t.Errorf("got thread %q, want %q", got, want)
	}
}

func TestDeliveryIdentity(t *testing.T) {
	t.Parallel()
	p := newProvider(t, baseURL)
	mapID := func(b []byte) string {
		t.Helper()
		res, err := p.Map(signed(b))
		if err != nil {
			t.Fatal(err)
		}
		return res.Items[0].MsgID
	}
	created := payload(t, "work_package.created.json")
	// A retried job renders the resource again: other bytes, same version.
	var v map[string]any
	if err := json.Unmarshal(created, &v); err != nil {
		t.Fatal(err)
	}
	rerendered, _ := json.Marshal(v)
	if a, b := mapID(created), mapID(rerendered); a != b {
		t.Errorf("got %q and %q for one work package version, want one identity", a, b)
	}
	if a, b := mapID(created), mapID(payload(t, "work_package.updated.json")); a == b {
		t.Errorf("created and updated share identity %q", a)
	}
	noID := []byte(`{"action":"wiki_page:updated","wiki_page":{"title":"Home"}}`)
	if got := mapID(noID); !strings.HasPrefix(got, "openproject:wiki_page:updated:sha256:") {
		t.Errorf("got %q, want a body hash identity", got)
	}
}

func TestValidateRejectsBadBaseURL(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"openproject.example.com", "ftp://x", "https://", "::"} {
		cfg := openproject.Config{Secret: secret.New(testSecret), BaseURL: base}
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate accepted base URL %q", base)
		}
		// New ignores it: threads fall back to DefaultHost.
		res, err := openproject.New(cfg).Map(signed(payload(t, "work_package.created.json")))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := res.Items[0].Envelope.Meta.Thread, "openproject:openproject/work_packages/1528"; got != want {
			t.Errorf("base %q: got thread %q, want %q", base, got, want)
		}
	}
}

func TestMapRejectsBadBodies(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, body string }{
		{"not json", "{"},
		{"array", "[]"},
		{"no action", `{"work_package":{"id":1}}`},
		{"action not a string", `{"action":5,"work_package":{"id":1}}`},
		{"no resource", `{"action":"work_package:created"}`},
		{"resource not an object", `{"action":"work_package:created","work_package":[1]}`},
		{"unknown action without resource", `{"action":"x:y","n":1}`},
		{"id of wrong type", `{"action":"work_package:created","work_package":{"id":{}}}`},
		{"links of wrong type", `{"action":"work_package:created","work_package":{"id":1,"_links":[]}}`},
	}
	p := newProvider(t, baseURL)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := p.Map(signed([]byte(tt.body)))
			mapperstest.CheckParseError(t, "openproject", err)
		})
	}
}
