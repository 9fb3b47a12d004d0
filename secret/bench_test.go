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
