package openproject_test

import (
	"testing"

	"github.com/relaystation/relay/mappers/mapperstest"
)

// BenchmarkVerifyMap measures verification and mapping of a work package
// update and a comment.
func BenchmarkVerifyMap(b *testing.B) {
	for _, file := range []string{"work_package.updated.json", "work_package_comment.comment.json"} {
		b.Run(file, func(b *testing.B) {
			mapperstest.BenchVerifyMap(b, newProvider(b, baseURL), signed(payload(b, file)))
		})
	}
}
