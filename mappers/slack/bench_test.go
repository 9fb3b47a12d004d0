package slack_test

import (
	"testing"

	"github.com/relaystation/relay/mappers/mapperstest"
)

// BenchmarkVerifyMap measures one Events API app_mention: verification and
// mapping, as the gateway runs them per request.
func BenchmarkVerifyMap(b *testing.B) {
	for _, tc := range []struct{ route, file string }{
		{"events", "testdata/events/app_mention_in_thread.json"},
		{"commands", "testdata/commands/weather.form"},
		{"interactions", "testdata/interactions/block_actions_approve_in_thread.json"},
	} {
		b.Run(tc.route, func(b *testing.B) {
			mapperstest.BenchVerifyMap(b, newProvider(), signed(tc.route, body(b, tc.route, tc.file)))
		})
	}
}
