package envelope

import (
	"testing"

	"github.com/relaystation/relay/internal/testenv"
)

// BenchmarkParse compares the fast path with the reference on the golden
// GitHub issue envelope.
func BenchmarkParse(b *testing.B) {
	raw := testenv.ReadFile(b, "testdata/valid/github-issue-opened.json")
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
