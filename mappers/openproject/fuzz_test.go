package openproject_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/openproject"
)

// FuzzVerify: no input panics and only the body's own signature is accepted.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"action":"work_package:created"}`), "sha1=00")
	f.Add([]byte(""), "")
	f.Add([]byte("x"), "sha1="+strings.Repeat("ab", 20))
	p := newProvider(f, "")
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		mapperstest.FuzzSignature(t, p, openproject.HeaderSignature, body, sig, openproject.SignatureHeader(testSecret, body))
	})
}

// FuzzMap: no input panics; the result is a *mappers.ParseError or one
// schema-valid envelope on in.openproject.{event}.
func FuzzMap(f *testing.F) {
	for _, pl := range mapperstest.Payloads(f, filepath.Join("testdata", "payloads", "*.json")) {
		f.Add(pl.Body)
	}
	f.Add([]byte(`{"action":"time_entry:created","time_entry":{"id":1,"_links":{"entity":{"href":"/api/v3/work_packages/99999999999999999999"}}}}`))
	f.Add([]byte(`{"action":":","a":{"_links":{"workPackage":{"href":"/work_packages/-1"}}}}`))
	p := newProvider(f, "https://op.example.com/")
	f.Fuzz(func(t *testing.T, body []byte) {
		res, ok := mapperstest.FuzzMap(t, p, signed(body), envelope.ChannelOpenProject)
		if ok && len(res.Items) != 1 {
			t.Fatalf("got %d items, want 1", len(res.Items))
		}
	})
}
