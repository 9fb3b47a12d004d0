package openproject_test

import "testing"

// BenchmarkVerifyMap measures verification and mapping of a work package
// update and a comment.
func BenchmarkVerifyMap(b *testing.B) {
	for _, file := range []string{"work_package.updated.json", "work_package_comment.comment.json"} {
		b.Run(file, func(b *testing.B) {
			body := payload(b, file)
			r := signed(body)
			p := newProvider(b, baseURL)
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
