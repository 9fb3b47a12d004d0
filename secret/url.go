package secret

import (
	"regexp"
	"strings"
)

// urlCredentials matches the user-info part of URLs in text
// ("nats://user:pass@", "redis://:pass@", "postgres://u:p@", "nats://token@")
// and key-value passwords ("password=..." in a libpq DSN).
var urlCredentials = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s"']+@|(?i)\b(password|passwd|pwd)=[^\s&"']+`)

// RedactURLs replaces the credentials of every URL in s (the user-info
// before '@') and every key-value password with REDACTED, keeping the rest,
// so a URL or an error that quotes one can be logged. Text without
// credentials is returned unchanged.
func RedactURLs(s string) string {
	if !strings.Contains(s, "@") && !strings.Contains(s, "=") {
		return s
	}
	return urlCredentials.ReplaceAllStringFunc(s, func(m string) string {
		if i := strings.Index(m, "://"); i >= 0 && strings.HasSuffix(m, "@") {
			return m[:i+3] + "REDACTED@"
		}
		k, _, _ := strings.Cut(m, "=")
		return k + "=REDACTED"
	})
}
