package envelope_test

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/schemas"
)

func TestGoldenEnvelopesValidate(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/valid/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden envelopes: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			raw := testenv.ReadFile(t, f)
			e, err := envelope.Parse(raw)
			if err != nil {
				t.Fatalf("got %v, want a valid envelope", err)
			}
			// Round trip: the Go type keeps every field, including unknown meta keys.
			again, err := e.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var want, got any
			_ = json.Unmarshal(raw, &want)
			_ = json.Unmarshal(again, &got)
			normalize(want)
			normalize(got)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip changed the envelope:\ngot  %s\nwant %s", again, raw)
			}
		})
	}
}

// normalize drops null tool results and reformats timestamps, which the Go type
// writes in canonical form.
func normalize(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	if ts, ok := m["timestamp"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			m["timestamp"] = t.UTC().Format(time.RFC3339Nano)
		}
	}
	if tc, ok := m["tool_call"].(map[string]any); ok {
		if tc["result"] == nil {
			delete(tc, "result")
		}
		if a, ok := tc["args"].(map[string]any); ok && len(a) == 0 {
			delete(tc, "args")
		}
	}
	if meta, ok := m["meta"].(map[string]any); ok && len(meta) == 0 {
		delete(m, "meta")
	}
}

func TestInvalidEnvelopesNameTheField(t *testing.T) {
	t.Parallel()
	raw := testenv.ReadFile(t, "testdata/invalid/cases.json")
	var cases []struct {
		Name  string          `json:"name"`
		Field string          `json:"field"`
		Doc   json.RawMessage `json:"doc"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			err := envelope.ValidateJSON(tc.Doc)
			var ve *envelope.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want *ValidationError", err)
			}
			if ve.Field != tc.Field {
				t.Errorf("got field %q (%v), want %q", ve.Field, err, tc.Field)
			}
			if !strings.Contains(err.Error(), tc.Field) {
				t.Errorf("message %q does not name %s", err, tc.Field)
			}
			if _, perr := envelope.Parse(tc.Doc); perr == nil {
				t.Error("Parse accepted an invalid envelope")
			}
		})
	}
}

func TestNewIsValid(t *testing.T) {
	t.Parallel()
	e := envelope.New(envelope.ChannelSlack, envelope.RoleUser, "hi")
	e.Meta.Thread = envelope.SlackThread("T1", "C1", "1700000000.000100")
	e.Meta.Set("slack", map[string]any{"bot": false})
	if err := envelope.Validate(e); err != nil {
		t.Fatalf("New produced an invalid envelope: %v", err)
	}
	if e.Meta.MCPVersion != envelope.Version {
		t.Errorf("got version %q, want %q", e.Meta.MCPVersion, envelope.Version)
	}
	r := e.Reply(envelope.ChannelInternal, envelope.RoleAssistant, "hello")
	if r.ID == e.ID || r.Meta.Thread != e.Meta.Thread {
		t.Errorf("reply got id %s thread %q, want a new id and thread %q", r.ID, r.Meta.Thread, e.Meta.Thread)
	}
	if err := envelope.Validate(nil); err == nil {
		t.Error("Validate(nil) passed")
	}
}

func TestMetaExtraRoundTrip(t *testing.T) {
	t.Parallel()
	in := []byte(`{"mcp_version":"1.0.0","thread":"x","custom":{"a":1},"task_id":"t"}`)
	var m envelope.Meta
	if err := json.Unmarshal(in, &m); err != nil {
		t.Fatal(err)
	}
	if m.Thread != "x" || m.TaskID != "t" {
		t.Errorf("got %+v, want thread x task t", m)
	}
	if _, ok := m.Get("custom"); !ok {
		t.Error("extra key lost")
	}
	if _, ok := m.Get("thread"); ok {
		t.Error("known key duplicated into Extra")
	}
	out, _ := json.Marshal(m)
	var back map[string]any
	_ = json.Unmarshal(out, &back)
	if back["thread"] != "x" || back["custom"] == nil {
		t.Errorf("got %s, want thread and custom kept", out)
	}
}

func TestThreadKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		got, want string
		ch        envelope.Channel
	}{
		{envelope.GitHubThread("octo", "hello", 7), "github:octo/hello#7", envelope.ChannelGitHub},
		{envelope.GitHubThread("octo", "hello", 1<<40), "github:octo/hello#1099511627776", envelope.ChannelGitHub},
		{envelope.GitHubThread("octo", "hello", -1), "github:octo/hello#-1", envelope.ChannelGitHub},
		{envelope.SlackThread("T1", "C2", "1.2"), "slack:T1/C2/1.2", envelope.ChannelSlack},
		{envelope.SentryThread("acme", "123"), "sentry:acme/123", envelope.ChannelSentry},
		{envelope.OpenProjectThread("op.example.com", 42), "openproject:op.example.com/work_packages/42", envelope.ChannelOpenProject},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
		if c := envelope.ThreadChannel(tc.got); c != tc.ch {
			t.Errorf("ThreadChannel(%q) = %q, want %q", tc.got, c, tc.ch)
		}
	}
	if c := envelope.ThreadChannel("nonsense"); c != "" {
		t.Errorf("got %q for a key without prefix, want empty", c)
	}
}

func TestThreadSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ thread, kind, source string }{
		{envelope.GitHubThread("octo", "hello", 7), "repository", "github:octo/hello"},
		{envelope.SlackThread("T1", "C2", "1.2"), "channel", "slack:T1/C2"},
		{"slack:T1/C2", "channel", "slack:T1/C2"},
		{envelope.SentryThread("acme", "123"), "repository", "sentry:acme"},
		{envelope.OpenProjectThread("op.example.com", 42), "repository", "openproject:op.example.com"},
		{"github:octo/hello", "", ""},
		{"slack:T1", "", ""},
		{"internal:x", "", ""},
		{"digest:github:octo/hello", "", ""},
		{"", "", ""},
	} {
		if k, s := envelope.ThreadSource(tc.thread); k != tc.kind || s != tc.source {
			t.Errorf("ThreadSource(%q) = %q, %q; want %q, %q", tc.thread, k, s, tc.kind, tc.source)
		}
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ got, want string }{
		{envelope.Inbound(envelope.ChannelGitHub, "issues"), "in.github.issues"},
		{envelope.Inbound(envelope.ChannelSlack, "app_mention"), "in.slack.app_mention"},
		{envelope.Inbound(envelope.ChannelOpenProject, "work_package:created"), "in.openproject.work_package:created"},
		{envelope.Inbound(envelope.ChannelSentry, "a.b *>"), "in.sentry.a_b___"},
		{envelope.Inbound(envelope.ChannelSentry, ""), "in.sentry._"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestHeaderCodec(t *testing.T) {
	t.Parallel()
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleTool, "x")
	e.Meta.Thread, e.Meta.TaskID = "github:a/b#1", "task-1"
	h := map[string][]string{}
	envelope.EncodeHeader(e, h)
	got := envelope.DecodeHeader(h)
	want := envelope.HeaderFields{ID: e.ID, Thread: "github:a/b#1", TaskID: "task-1", Version: envelope.Version, Channel: "github", Role: "tool"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// addValidSeeds seeds f with the golden envelopes in testdata/valid.
func addValidSeeds(f *testing.F) {
	files, _ := filepath.Glob("testdata/valid/*.json")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
}

func FuzzParse(f *testing.F) {
	addValidSeeds(f)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id": 1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := envelope.Parse(b)
		if err != nil {
			if _, ok := errors.AsType[*envelope.ValidationError](err); !ok {
				t.Fatalf("got %T %v, want *ValidationError", err, err)
			}
			return
		}
		// Whatever parses must marshal back to something that still validates.
		out, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := envelope.ValidateJSON(out); err != nil {
			t.Fatalf("re-marshalled envelope invalid: %v\n%s", err, out)
		}
	})
}

// FuzzCheckMatchesSchema keeps Check (the fast path) and the JSON Schema in
// step: for every envelope the Go type can hold, both accept or both refuse.
func FuzzCheckMatchesSchema(f *testing.F) {
	addValidSeeds(f)
	raw, _ := os.ReadFile("testdata/invalid/cases.json")
	var cases []struct {
		Doc json.RawMessage `json:"doc"`
	}
	_ = json.Unmarshal(raw, &cases)
	for _, c := range cases {
		f.Add([]byte(c.Doc))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var e envelope.Envelope
		if json.Unmarshal(b, &e) != nil {
			return
		}
		out, err := e.Marshal()
		if err != nil {
			return // not representable as JSON (year > 9999): never published
		}
		schemaErr := envelope.ValidateJSON(out)
		checkErr := envelope.Check(&e)
		if (schemaErr == nil) != (checkErr == nil) {
			t.Fatalf("schema says %v, Check says %v for\n%s", schemaErr, checkErr, out)
		}
	})
}

// FuzzMarshalMatchesReflection checks the hand-written encoder against
// encoding/json's reflection of the same value.
func FuzzMarshalMatchesReflection(f *testing.F) {
	addValidSeeds(f)
	f.Add([]byte(`{"content":"<a href=\"x\">&amp;</a>\u2028\u0001\ud800","meta":{"thread":"\t"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e envelope.Envelope
		if json.Unmarshal(b, &e) != nil {
			return
		}
		fast, ferr := e.Marshal()
		type plain envelope.Envelope // no MarshalJSON method: reflection
		slow, serr := json.Marshal((*plain)(&e))
		if (ferr == nil) != (serr == nil) {
			t.Fatalf("fast err %v, reflection err %v", ferr, serr)
		}
		if ferr != nil {
			return
		}
		var a, c any
		if err := json.Unmarshal(fast, &a); err != nil {
			t.Fatalf("fast output is not JSON: %v\n%s", err, fast)
		}
		_ = json.Unmarshal(slow, &c)
		// Meta has its own encoder too: compare it with reflection's.
		if doc, ok := c.(map[string]any); ok {
			var m any
			_ = json.Unmarshal(reflectMeta(t, e.Meta), &m)
			doc["meta"] = m
		}
		if !reflect.DeepEqual(a, c) {
			t.Fatalf("fast and reflection differ:\nfast %s\nslow %s", fast, slow)
		}
	})
}

// reflectMeta encodes m through encoding/json's reflection: its known
// fields in struct order, or, with Extra, every key in one sorted object,
// the known fields winning.
func reflectMeta(t *testing.T, m envelope.Meta) []byte {
	type fields envelope.Meta // no MarshalJSON method
	known, err := json.Marshal(fields(m))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Extra) == 0 {
		return known
	}
	all := map[string]any{}
	maps.Copy(all, m.Extra)
	var k map[string]json.RawMessage
	if err := json.Unmarshal(known, &k); err != nil {
		t.Fatal(err)
	}
	for name, v := range k {
		all[name] = v
	}
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMetaMarshalMatchesReflection checks the meta encoder byte for byte,
// key order included, with and without extra keys.
func TestMetaMarshalMatchesReflection(t *testing.T) {
	t.Parallel()
	for name, m := range map[string]envelope.Meta{
		"known only": {MCPVersion: "1.0.0", Thread: "github:o/r#1", Source: &envelope.Source{Event: "issues", URL: "https://x/<a>&"}, Budget: &envelope.Budget{Tokens: 3, Limit: 9}},
		"extras": {Thread: "t", Budget: &envelope.Budget{Tokens: 1},
			Extra: map[string]any{"facts": map[string]any{"repository": "o/r", "labels": []any{"bug", nil, 2.5e21}, "number": 7, "big": int64(-3)},
				"bot": true, "a": "<x>", "zz": 1.5, "list": []string{"a\u2028"}, "none": []string(nil), "nomap": map[string]any(nil), "n": nil}},
		"extra named as an unset known field": {TaskID: "task", Extra: map[string]any{"thread": "from extra"}},
		"empty":                               {},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := m.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if want := reflectMeta(t, m); string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestTargetRoundTrip(t *testing.T) {
	t.Parallel()
	e := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, "answer")
	want := &envelope.Target{Channel: "github", Owner: "octo", Repo: "hello", Number: 7}
	e.Meta.SetTarget(want)
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := envelope.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := back.Meta.Target()
	if err != nil || *got != *want {
		t.Fatalf("got %+v (%v), want %+v", got, err, want)
	}
	if !got.NeedsApproval() || (&envelope.Target{Channel: "slack", SlackCh: "C1"}).NeedsApproval() {
		t.Error("NeedsApproval: want true for GitHub, false for Slack")
	}
	for _, bad := range []envelope.Target{{Channel: "github", Owner: "o"}, {Channel: "slack"}, {Channel: "fax"}, {Channel: "webhook"}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

// TestValidateAgainst: any embedded schema checks a document, naming the
// offending field ("/" for one that is not JSON); an unknown schema is an
// error of its own, not a *ValidationError.
func TestValidateAgainst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, doc string
		field             string // "" means valid
	}{
		{"valid bundle", "bundle.schema.json", `{"id":"b","version":"1","servers":{"s":{}}}`, ""},
		{"bundle without version", "bundle.schema.json", `{"id":"b","servers":{"s":{}}}`, "/version"},
		{"empty envelope", schemas.MCPMessage, `{}`, "/id"},
		{"not JSON", "bundle.schema.json", `{"id":`, "/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := envelope.ValidateAgainst(tc.schema, []byte(tc.doc))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			var ve *envelope.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field {
				t.Fatalf("got %v, want a *ValidationError at %s", err, tc.field)
			}
		})
	}
	err := envelope.ValidateAgainst("nope.schema.json", []byte(`{}`))
	var ve *envelope.ValidationError
	if err == nil || errors.As(err, &ve) || !strings.Contains(err.Error(), "nope.schema.json") {
		t.Errorf("unknown schema: got %v, want a read error naming it", err)
	}
}

// TestSchemaCompilesOnce: Schema hands out one compiled schema per name.
func TestSchemaCompilesOnce(t *testing.T) {
	t.Parallel()
	a, err := envelope.Schema(schemas.MCPMessage)
	if err != nil {
		t.Fatal(err)
	}
	b, err := envelope.Schema(schemas.MCPMessage)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("got two compiled schemas for one name, want the same one")
	}
}
