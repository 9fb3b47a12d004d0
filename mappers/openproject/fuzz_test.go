package openproject_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/openproject"
)

// FuzzVerify: no input panics and only the body's own signature is accepted.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"action":"work_package:created"}`), "sha1=00")
	f.Add([]byte(""), "")
	f.Add([]byte("x"), "sha1="+strings.Repeat("ab", 20))
	p := newProvider(f, "")
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		h := http.Header{}
		h.Set(openproject.HeaderSignature, sig)
		r := &mappers.Request{Header: h, Body: body}
		err := p.Verify(r)
		good := openproject.SignatureHeader(testSecret, body)
		if err == nil && !strings.EqualFold(sig, good) {
			t.Fatalf("accepted %q, want only %q", sig, good)
		}
		var se *mappers.SignatureError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("got %T %v, want *mappers.SignatureError", err, err)
		}
		h.Set(openproject.HeaderSignature, good)
		if err := p.Verify(r); err != nil {
			t.Fatalf("refused a correctly signed body: %v", err)
		}
	})
}

// FuzzMap: no input panics; the result is a *mappers.ParseError or one
// schema-valid envelope on in.openproject.{event}.
func FuzzMap(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "payloads", "*.json"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"action":"time_entry:created","time_entry":{"id":1,"_links":{"entity":{"href":"/api/v3/work_packages/99999999999999999999"}}}}`))
	f.Add([]byte(`{"action":":","a":{"_links":{"workPackage":{"href":"/work_packages/-1"}}}}`))
	p := newProvider(f, "https://op.example.com/")
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := p.Map(signed(body))
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
		if !strings.HasPrefix(it.Subject, "in.openproject.") || strings.Count(it.Subject, ".") != 2 || it.MsgID == "" {
			t.Fatalf("got subject %q msg id %q", it.Subject, it.MsgID)
		}
		if err := envelope.Validate(it.Envelope); err != nil {
			t.Fatalf("invalid envelope: %v", err)
		}
	})
}
