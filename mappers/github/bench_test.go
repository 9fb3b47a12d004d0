package github_test

import (
	"os"
	"testing"
)

// BenchmarkVerify measures signature verification of a real 13.5 kB issues webhook.
func BenchmarkVerify(b *testing.B) {
	body, err := os.ReadFile("testdata/payloads/issues.opened.json")
	if err != nil {
		b.Fatal(err)
	}
	p, r := newProvider(), request("issues", "d", body)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := p.Verify(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMap measures the mapping (go-github typed decode) of the same webhook.
func BenchmarkMap(b *testing.B) {
	body, err := os.ReadFile("testdata/payloads/issues.opened.json")
	if err != nil {
		b.Fatal(err)
	}
	p, r := newProvider(), request("issues", "d", body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Map(r); err != nil {
			b.Fatal(err)
		}
	}
}
