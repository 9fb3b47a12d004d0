package sentry_test

import "testing"

// BenchmarkVerifyMap measures verification and mapping of the documented
// issue and error webhooks.
func BenchmarkVerifyMap(b *testing.B) {
	for _, file := range []string{"issue.created.json", "error.created.json"} {
		b.Run(file, func(b *testing.B) {
			resource, body := payload(b, file)
			r := signed(resource, body)
			p := newProvider("test-org")
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Verify(r); err != nil {
					b.Fatal(err)
				}
				if _, err := p.Map(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
