// Package mapperstest holds the test harness shared by the inbound providers
// in mappers/...: reading payload files, verifying and mapping a request,
// rendering the result in a run-independent form, comparing it with a golden
// file (rewritten with go test -update), validating every golden envelope
// against the schema, and the common checks of verify and fuzz tests.
//
// It is imported only by tests.
package mapperstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers"
)

// Update is the -update flag: when set, golden comparisons first rewrite the
// golden file with what the test produced.
var Update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Received is the fixed receive time of golden requests; providers take the
// envelope timestamp from it, so timestamps in goldens do not vary per run.
var Received = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// FixedID replaces the random envelope id in goldens; it is a valid UUID v4.
const FixedID = "00000000-0000-4000-8000-000000000000"

// Payload is one payload file read from testdata.
type Payload struct {
	Path string // as matched by the glob pattern
	Name string // file name, with its extension
	Body []byte
}

// Stem is the payload's file name up to its first dot: the event or resource
// of files named {event}.{case}.json.
func (p Payload) Stem() string { return Stem(p.Path) }

// Stem is the file name of path up to its first dot.
func Stem(path string) string {
	s, _, _ := strings.Cut(filepath.Base(path), ".")
	return s
}

// Payloads reads every file matching the glob pattern, failing tb if none
// matches or one cannot be read.
func Payloads(tb testing.TB, pattern string) []Payload {
	tb.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		tb.Fatalf("no payloads match %s: %v", pattern, err)
	}
	out := make([]Payload, 0, len(files))
	for _, f := range files {
		out = append(out, Payload{Path: f, Name: filepath.Base(f), Body: testenv.ReadFile(tb, f)})
	}
	return out
}

// VerifyMap runs p.Verify and then p.Map on r, failing t on either error.
func VerifyMap(t testing.TB, p mappers.Provider, r *mappers.Request) mappers.Result {
	t.Helper()
	if err := p.Verify(r); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	res, err := p.Map(r)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	return res
}

// MapOne maps r with p and returns its only item, failing t unless Map
// succeeds with exactly one item whose envelope validates.
func MapOne(t testing.TB, p mappers.Provider, r *mappers.Request) mappers.Item {
	t.Helper()
	res, err := p.Map(r)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	if len(res.Items) != 1 {
		t.Fatalf("Map: got %d items, want 1", len(res.Items))
	}
	if err := envelope.Validate(res.Items[0].Envelope); err != nil {
		t.Fatalf("Map: %v", err)
	}
	return res.Items[0]
}

// Normalize replaces the fields of e that vary per run with fixed values: the
// random id, which must be a UUID v4, becomes FixedID. (Timestamps are fixed
// by mapping requests received at Received.)
func Normalize(t testing.TB, e *envelope.Envelope) {
	t.Helper()
	id, err := uuid.Parse(e.ID)
	if err != nil || id.Version() != 4 {
		t.Fatalf("envelope id %q is not a UUID v4", e.ID)
	}
	e.ID = FixedID
}

// Encode writes v as JSON, indented by indent, without HTML escaping, so
// goldens read like the providers' own markup ("<@U123>").
func Encode(t testing.TB, v any, indent string) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Canonical is the envelope's wire JSON (envelope.Marshal) re-encoded with
// sorted keys and without HTML escaping: the same document, independent of the
// encoder's field order and escaping, and readable in a diff.
func Canonical(t testing.TB, e *envelope.Envelope) []byte {
	t.Helper()
	wire, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(wire))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("envelope wire form: %v", err)
	}
	return Encode(t, v, "")
}

// Item is one mapped item as a golden file records it.
type Item struct {
	Subject  string          `json:"subject"`
	MsgID    string          `json:"msg_id"`
	Envelope json.RawMessage `json:"envelope"`
}

// Reply is a mapping's direct HTTP reply as a golden file records it.
type Reply struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Body        string `json:"body"`
}

// Doc is a golden document: a mapping's reply, if any, and its items.
type Doc struct {
	Reply *Reply `json:"reply,omitempty"`
	Items []Item `json:"items"`
}

// Render is the golden document of res: its reply and its items, each
// envelope normalized (Normalize) and in Canonical form.
func Render(t testing.TB, res mappers.Result) []byte {
	t.Helper()
	doc := Doc{Items: []Item{}}
	if res.Reply != nil {
		doc.Reply = &Reply{Status: res.Reply.Status, ContentType: res.Reply.ContentType, Body: string(res.Reply.Body)}
	}
	for _, it := range res.Items {
		Normalize(t, it.Envelope)
		doc.Items = append(doc.Items, Item{Subject: it.Subject, MsgID: it.MsgID, Envelope: Canonical(t, it.Envelope)})
	}
	return Encode(t, doc, "  ")
}

// RenderItem is the golden form of a single item as encoding/json writes it:
// the envelope normalized (Normalize) in its JSON encoding, HTML escaped, the
// whole indented by two spaces.
func RenderItem(t testing.TB, it mappers.Item) []byte {
	t.Helper()
	Normalize(t, it.Envelope)
	env, err := json.Marshal(it.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(Item{Subject: it.Subject, MsgID: it.MsgID, Envelope: env}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(got, '\n')
}

// Golden compares got with the golden file at path and returns the file's
// contents. With -update it first (re)writes the file, creating its folder.
func Golden(t testing.TB, path string, got []byte) []byte {
	t.Helper()
	if *Update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("got differs from %s (rerun with -update if intended)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
	return want
}

// GoldenDoc verifies and maps r with p, compares the Render of the result with
// the golden file at path, checks that every envelope in the golden file is
// schema-valid (envelope.ValidateJSON) and returns the golden document for the
// caller's own checks.
func GoldenDoc(t testing.TB, p mappers.Provider, r *mappers.Request, path string) Doc {
	t.Helper()
	want := Golden(t, path, Render(t, VerifyMap(t, p, r)))
	var doc Doc
	if err := json.Unmarshal(want, &doc); err != nil {
		t.Fatalf("golden %s: %v", path, err)
	}
	for i, it := range doc.Items {
		if err := envelope.ValidateJSON(it.Envelope); err != nil {
			t.Errorf("golden %s item %d: %v", path, i, err)
		}
	}
	return doc
}

// GoldenItem is GoldenDoc for goldens that hold one item in RenderItem form:
// the mapping must give exactly one item.
func GoldenItem(t testing.TB, p mappers.Provider, r *mappers.Request, path string) Item {
	t.Helper()
	res := VerifyMap(t, p, r)
	if len(res.Items) != 1 {
		t.Fatalf("got %d items, want 1", len(res.Items))
	}
	want := Golden(t, path, RenderItem(t, res.Items[0]))
	var it Item
	if err := json.Unmarshal(want, &it); err != nil {
		t.Fatalf("golden %s: %v", path, err)
	}
	if err := envelope.ValidateJSON(it.Envelope); err != nil {
		t.Errorf("golden %s is not a valid envelope: %v", path, err)
	}
	return it
}

// CheckGoldenItems checks the address of every item of a golden document:
// its subject must be subject (or, if subject ends in a dot, start with it)
// and its msg id must start with msgIDPrefix and not be empty.
func CheckGoldenItems(t testing.TB, path string, doc Doc, subject, msgIDPrefix string) {
	t.Helper()
	for i, it := range doc.Items {
		okSubject := it.Subject == subject || strings.HasSuffix(subject, ".") && strings.HasPrefix(it.Subject, subject)
		if !okSubject || it.MsgID == "" || !strings.HasPrefix(it.MsgID, msgIDPrefix) {
			t.Errorf("golden %s item %d: subject %q, msg id %q", path, i, it.Subject, it.MsgID)
		}
	}
}

// Mapped is what a mapping test expects of an item: Thread, Role and
// Channel are compared whole, Content is a part the envelope's content must
// hold, and MsgID, URL and Actor are checked only when set.
type Mapped struct {
	Thread  string
	Content string
	Role    envelope.Role
	Channel envelope.Channel
	MsgID   string
	URL     string
	Actor   string
}

// CheckMapped compares it with want and returns its envelope's
// meta.source, stopping t when there is none.
func CheckMapped(t testing.TB, it mappers.Item, want Mapped) *envelope.Source {
	t.Helper()
	e := it.Envelope
	if e.Meta.Thread != want.Thread {
		t.Errorf("got thread %q, want %q", e.Meta.Thread, want.Thread)
	}
	if !strings.Contains(e.Content, want.Content) {
		t.Errorf("got content %q, want it to contain %q", e.Content, want.Content)
	}
	if e.Role != want.Role || e.Channel != want.Channel {
		t.Errorf("got role %q channel %q, want %q %s", e.Role, e.Channel, want.Role, want.Channel)
	}
	if want.MsgID != "" && it.MsgID != want.MsgID {
		t.Errorf("got msg id %q, want %q", it.MsgID, want.MsgID)
	}
	src := e.Meta.Source
	if src == nil {
		t.Fatal("got no meta.source")
	}
	if want.URL != "" && src.URL != want.URL {
		t.Errorf("got url %q, want %q", src.URL, want.URL)
	}
	if want.Actor != "" && src.Actor != want.Actor {
		t.Errorf("got actor %q, want %q", src.Actor, want.Actor)
	}
	return src
}

// ErrSignature stands for "a *mappers.SignatureError" in the want column of
// verify tables (see CheckVerifyErr).
var ErrSignature = errors.New("a *mappers.SignatureError")

// CheckVerifyErr checks an error of provider's Verify against want: nil, or
// ErrSignature for a *mappers.SignatureError of that provider with a reason,
// or any other error, matched with errors.Is (such as mappers.ErrNoSecret).
func CheckVerifyErr(t testing.TB, provider string, err, want error) {
	t.Helper()
	switch want {
	case nil:
		if err != nil {
			t.Errorf("got %v, want nil", err)
		}
	case ErrSignature:
		var se *mappers.SignatureError
		if !errors.As(err, &se) || se.Provider != provider || se.Reason == "" {
			t.Errorf("got %v, want a %s *mappers.SignatureError", err, provider)
		}
	default:
		if !errors.Is(err, want) {
			t.Errorf("got %v, want %v", err, want)
		}
	}
}

// VerifyCase is one row of a table of signature checks for providers that
// sign the body alone under one header.
type VerifyCase struct {
	Name   string
	Secret string // the provider's secret
	Sig    string // the signature header, not set if empty
	Body   []byte
	Want   error // as for CheckVerifyErr
}

// BasicVerifyCases are the cases every body-signing provider must pass, given
// its secret, a body and good, the body's signature under that secret: the
// valid signature, no secret configured, no signature, another secret and a
// tampered body.
func BasicVerifyCases(secret string, body []byte, good string) []VerifyCase {
	return []VerifyCase{
		{Name: "valid", Secret: secret, Sig: good, Body: body},
		{Name: "no secret", Secret: "", Sig: good, Body: body, Want: mappers.ErrNoSecret},
		{Name: "missing signature", Secret: secret, Body: body, Want: ErrSignature},
		{Name: "wrong secret", Secret: "other", Sig: good, Body: body, Want: ErrSignature},
		{Name: "tampered body", Secret: secret, Sig: good, Body: append(body[:len(body):len(body)], ' '), Want: ErrSignature},
	}
}

// RunVerifyCases runs each case as a parallel subtest: a provider made by
// newProvider with the case's secret verifies a request received at Received
// with the case's body and signature (in header), and the error is checked
// with CheckVerifyErr.
func RunVerifyCases(t *testing.T, provider, header string, newProvider func(secret string) mappers.Provider, cases []VerifyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			r := &mappers.Request{Header: http.Header{}, Body: tc.Body, Received: Received}
			if tc.Sig != "" {
				r.Header.Set(header, tc.Sig)
			}
			CheckVerifyErr(t, provider, newProvider(tc.Secret).Verify(r), tc.Want)
		})
	}
}

// CheckParseError fails t unless err is a *mappers.ParseError of provider.
func CheckParseError(t testing.TB, provider string, err error) {
	t.Helper()
	var pe *mappers.ParseError
	if !errors.As(err, &pe) || pe.Provider != provider {
		t.Errorf("got %v, want a %s *mappers.ParseError", err, provider)
	}
}

// FuzzSignature is the body of a FuzzVerify target for providers that sign
// the body alone under one header. Verify must not panic; with sig in header
// it may accept only good (compared without regard to case) and must refuse
// anything else with a *mappers.SignatureError; with good it must accept.
func FuzzSignature(t *testing.T, p mappers.Provider, header string, body []byte, sig, good string) {
	t.Helper()
	r := &mappers.Request{Header: http.Header{}, Body: body}
	r.Header.Set(header, sig)
	err := p.Verify(r)
	if err == nil && !strings.EqualFold(sig, good) {
		t.Fatalf("accepted %q, want only %q", sig, good)
	}
	CheckSignatureError(t, err)
	r.Header.Set(header, good)
	if err := p.Verify(r); err != nil {
		t.Fatalf("refused a correctly signed body: %v", err)
	}
}

// CheckSignatureError fails t unless err is nil or a *mappers.SignatureError.
func CheckSignatureError(t testing.TB, err error) {
	t.Helper()
	var se *mappers.SignatureError
	if err != nil && !errors.As(err, &se) {
		t.Fatalf("got %T %v, want *mappers.SignatureError", err, err)
	}
}

// FuzzMap is the common body of a FuzzMap target. p.Map(r) must not panic and
// must give either a *mappers.ParseError, when FuzzMap returns false, or items
// on in.{ch}.{token} (exactly three subject tokens, none with a NATS special
// character) with a msg id and an envelope that validates, when it returns the
// result and true for the caller's own checks.
func FuzzMap(t *testing.T, p mappers.Provider, r *mappers.Request, ch envelope.Channel) (mappers.Result, bool) {
	t.Helper()
	res, err := p.Map(r)
	if err != nil {
		var pe *mappers.ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("got %T %v, want *mappers.ParseError", err, err)
		}
		return res, false
	}
	prefix := envelope.SubjectInbound + "." + string(ch) + "."
	for _, it := range res.Items {
		if !strings.HasPrefix(it.Subject, prefix) || strings.Count(it.Subject, ".") != 2 ||
			strings.ContainsAny(it.Subject, " *>\t") || it.MsgID == "" {
			t.Fatalf("got subject %q msg id %q", it.Subject, it.MsgID)
		}
		if err := envelope.Validate(it.Envelope); err != nil {
			t.Fatalf("invalid envelope for %q: %v", r.Body, err)
		}
	}
	return res, true
}

// BenchVerifyMap measures p.Verify and p.Map of r, as a gateway runs them per
// request, reporting the body's bytes and the allocations per operation.
func BenchVerifyMap(b *testing.B, p mappers.Provider, r *mappers.Request) {
	b.Helper()
	b.SetBytes(int64(len(r.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Verify(r); err != nil {
			b.Fatal(err)
		}
		if _, err := p.Map(r); err != nil {
			b.Fatal(err)
		}
	}
}
