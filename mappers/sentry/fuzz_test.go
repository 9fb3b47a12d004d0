package sentry_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/sentry"
)

// FuzzVerify: no input panics and only the body's own signature is accepted.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"action":"created"}`), "00")
	f.Add([]byte(""), "")
	f.Add([]byte("x"), strings.Repeat("ab", 32))
	p := newProvider("")
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		mapperstest.FuzzSignature(t, p, sentry.HeaderSignature, body, sig, sentry.SignatureHeader(testSecret, body))
	})
}

// FuzzMap: no input panics; the result is a *mappers.ParseError or one
// schema-valid envelope on in.sentry.{resource}.
func FuzzMap(f *testing.F) {
	for _, pl := range mapperstest.Payloads(f, filepath.Join("testdata", "payloads", "*.json")) {
		f.Add(pl.Stem(), pl.Body)
	}
	f.Add("issue", []byte(`{"data":{"issue":{"id":1e400}}}`))
	f.Add("comment", []byte(`{"data":{"issue_id":-0,"comment":null}}`))
	p := newProvider("test-org")
	f.Fuzz(func(t *testing.T, resource string, body []byte) {
		res, ok := mapperstest.FuzzMap(t, p, signed(resource, body), envelope.ChannelSentry)
		if ok && len(res.Items) != 1 {
			t.Fatalf("got %d items, want 1", len(res.Items))
		}
	})
}
