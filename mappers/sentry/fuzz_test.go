package sentry_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/sentry"
)

// FuzzVerify: no input panics and only the body's own signature is accepted.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"action":"created"}`), "00")
	f.Add([]byte(""), "")
	f.Add([]byte("x"), strings.Repeat("ab", 32))
	p := newProvider("")
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		h := http.Header{}
		h.Set(sentry.HeaderSignature, sig)
		r := &mappers.Request{Header: h, Body: body}
		err := p.Verify(r)
		good := sentry.SignatureHeader(testSecret, body)
		if err == nil && !strings.EqualFold(sig, good) {
			t.Fatalf("accepted %q, want only %q", sig, good)
		}
		var se *mappers.SignatureError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("got %T %v, want *mappers.SignatureError", err, err)
		}
		h.Set(sentry.HeaderSignature, good)
		if err := p.Verify(r); err != nil {
			t.Fatalf("refused a correctly signed body: %v", err)
		}
	})
}

// FuzzMap: no input panics; the result is a *mappers.ParseError or one
// schema-valid envelope on in.sentry.{resource}.
func FuzzMap(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "payloads", "*.json"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		resource, _, _ := strings.Cut(filepath.Base(file), ".")
		f.Add(resource, b)
	}
	f.Add("issue", []byte(`{"data":{"issue":{"id":1e400}}}`))
	f.Add("comment", []byte(`{"data":{"issue_id":-0,"comment":null}}`))
	p := newProvider("test-org")
	f.Fuzz(func(t *testing.T, resource string, body []byte) {
		res, err := p.Map(signed(resource, body))
		if err != nil {
			var pe *mappers.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("got %T %v, want *mappers.ParseError", err, err)
			}
			return
		}
		if len(res.Items) != 1 {
			t.Fatalf("got %d items, want 1", len(res.Items))
		}
		it := res.Items[0]
		if !strings.HasPrefix(it.Subject, "in.sentry.") || strings.Count(it.Subject, ".") != 2 || it.MsgID == "" {
			t.Fatalf("got subject %q msg id %q", it.Subject, it.MsgID)
		}
		if err := envelope.Validate(it.Envelope); err != nil {
			t.Fatalf("invalid envelope: %v", err)
		}
	})
}
