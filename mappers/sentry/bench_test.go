package sentry_test

import (
	"testing"

	"github.com/relaystation/relay/mappers/mapperstest"
)

// BenchmarkVerifyMap measures verification and mapping of the documented
// issue and error webhooks.
func BenchmarkVerifyMap(b *testing.B) {
	for _, file := range []string{"issue.created.json", "error.created.json"} {
		b.Run(file, func(b *testing.B) {
			mapperstest.BenchVerifyMap(b, newProvider("test-org"), signed(payload(b, file)))
		})
	}
}
