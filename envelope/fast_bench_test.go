package envelope

import (
	"os"
	"testing"
)

// BenchmarkParse compares the fast path with the reference on the golden
// GitHub issue envelope.
func BenchmarkParse(b *testing.B) {
	raw, err := os.ReadFile("testdata/valid/github-issue-opened.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		parse func([]byte) (*Envelope, error)
	}{{"fast", Parse}, {"schema", parseChecked}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := bc.parse(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
