package github_test

import (
	"net/http"
	"strings"
	"testing"

	gh "github.com/google/go-github/v60/github"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/mapperstest"
)

// FuzzVerify checks that Verify never panics, accepts exactly what go-github's
// ValidateSignature accepts for sha256 signatures, and refuses everything else.
func FuzzVerify(f *testing.F) {
	body := []byte(`{"zen":"hi"}`)
	f.Add(body, github.Sign([]byte(testSecret), body), "")
	f.Add(body, "sha256=00", "")
	f.Add(body, "", "sha1=0123")
	f.Add(body, "sha512=abcd", "")
	f.Add([]byte{}, "sha256="+strings.Repeat("zz", 32), "")
	f.Add(body, "sha256", "")
	p := newProvider()
	f.Fuzz(func(t *testing.T, body []byte, sig256, sha1 string) {
		h := http.Header{}
		h.Set(github.HeaderSignature256, sig256)
		h.Set(github.HeaderSignatureSHA1, sha1)
		err := p.Verify(&mappers.Request{Header: h, Body: body})
		sig := h.Get(github.HeaderSignature256) // as the header stores it
		ref := gh.ValidateSignature(sig, body, []byte(testSecret))
		if err == nil && (ref != nil || !strings.HasPrefix(sig, "sha256=")) {
			t.Fatalf("Verify accepted %q that go-github refuses (%v) or is not sha256", sig, ref)
		}
		mapperstest.CheckSignatureError(t, err)
		if err != nil {
			if ref == nil && strings.HasPrefix(sig, "sha256=") && len(sig) == len("sha256=")+64 && strings.ToLower(sig) == sig {
				t.Fatalf("Verify refused %q that go-github accepts: %v", sig, err)
			}
		}
	})
}

// FuzzMap checks that Map never panics and gives either a *mappers.ParseError
// or exactly one schema-valid envelope.
func FuzzMap(f *testing.F) {
	for _, pl := range mapperstest.Payloads(f, "testdata/payloads/*.json") {
		if len(pl.Body) <= 20000 {
			f.Add(pl.Stem(), pl.Body)
		}
	}
	for _, ev := range gh.MessageTypes() { // every typed event, empty and with null objects
		f.Add(ev, []byte(`{}`))
		f.Add(ev, []byte(`{"action":"completed","repository":null,"sender":null,"pull_request":null,"issue":null}`))
	}
	f.Add("issues", []byte(`{"issue":null}`))
	f.Add("check_run", []byte(`{"check_run":{"pull_requests":[null,{"number":1e99}]}}`))
	f.Add("x.y*>", []byte(`{"repository":{"full_name":"/"}}`))
	p := newProvider()
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		h := http.Header{}
		h.Set(github.HeaderEvent, event)
		h.Set(github.HeaderDelivery, "d")
		res, ok := mapperstest.FuzzMap(t, p, &mappers.Request{Header: h, Body: body}, envelope.ChannelGitHub)
		if ok && len(res.Items) != 1 {
			t.Fatalf("got %d items, want 1", len(res.Items))
		}
	})
}
