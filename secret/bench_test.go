package secret_test

import (
	"strings"
	"testing"

	"github.com/relaystation/relay/secret"
)

// BenchmarkRedactBearer redacts a 64 KiB tool result: without credentials
// (the common case, decided by the pre-check) and with one.
func BenchmarkRedactBearer(b *testing.B) {
	plain := strings.Repeat("The build broke on step 4; see the log for details. ", 1300)[:64<<10]
	for name, text := range map[string]string{
		"clean":      plain,
		"credential": plain[:32<<10] + " Authorization: Bearer abcdefgh12345678 " + plain[32<<10:],
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				secret.RedactBearer(text, "[REDACTED]")
			}
		})
	}
}

// BenchmarkRedactTokens redacts a webhook's text of 4,000 bytes (the
// mappers' content limit): without credentials (the common case, decided by
// the pre-check) and with one.
func BenchmarkRedactTokens(b *testing.B) {
	plain := strings.Repeat("Though the high light in the kitchen broke, check the token expiry. ", 60)[:4000]
	for name, text := range map[string]string{
		"clean":      plain,
		"credential": plain[:2000] + " ghp_" + strings.Repeat("a", 36) + " " + plain[2000:],
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				secret.RedactTokens(text, "[REDACTED]")
			}
		})
	}
}
