package github_test

import (
	"testing"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers"
)

// issuesOpened is a real 13.5 kB issues webhook, signed.
func issuesOpened(b *testing.B) *mappers.Request {
	b.Helper()
	r := request("issues", "d", testenv.ReadFile(b, "testdata/payloads/issues.opened.json"))
	b.SetBytes(int64(len(r.Body)))
	return r
}

// BenchmarkVerify measures signature verification of a real 13.5 kB issues webhook.
func BenchmarkVerify(b *testing.B) {
	p, r := newProvider(), issuesOpened(b)
	for b.Loop() {
		if err := p.Verify(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMap measures the mapping (go-github typed decode) of the same webhook.
func BenchmarkMap(b *testing.B) {
	p, r := newProvider(), issuesOpened(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Map(r); err != nil {
			b.Fatal(err)
		}
	}
}
