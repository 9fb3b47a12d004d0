// Package clip bounds text in bytes without cutting a UTF-8 character in
// half. It is the relay's one truncation helper: envelope fields, error
// bodies, tool results, summaries, dead-letter reasons and notices all go
// through it.
//
// Lengths are in bytes, the unit of most limits the relay meets (NATS
// payloads, and Slack's character limits, which a byte count never
// undercounts), except for Chars, which counts characters.
// A cut never ends inside a valid UTF-8 sequence; bytes that are not valid
// UTF-8 count as characters of their own. The functions are pure and safe for
// concurrent use.
package clip

import (
	"strings"
	"unicode/utf8"
)

// Ellipsis marks a cut.
const Ellipsis = "…"

// Prefix returns the longest prefix of s of at most n bytes that does not end
// inside a UTF-8 character: s itself when it fits, "" when n <= 0. It is at
// most three bytes shorter than n.
func Prefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	// s[n] is the first byte left out. When it continues a character that
	// starts at most three bytes earlier, cut before that character.
	for c := n; c >= 0 && c > n-utf8.UTFMax; c-- {
		if utf8.RuneStart(s[c]) {
			if _, size := utf8.DecodeRuneInString(s[c:]); c+size > n {
				return s[:c]
			}
			break
		}
	}
	return s[:n]
}

// To bounds s to n bytes and marks a cut: s when it fits, else Prefix(s, n)
// followed by "…" (so at most n+3 bytes).
func To(s string, n int) string { return Mark(s, n, Ellipsis) }

// Mark is To with its own marker, for example "\n… (truncated)".
func Mark(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	return Prefix(s, n) + mark
}

// Within bounds s to n bytes, the marker included: s when it fits, else the
// longest Prefix that leaves room for "…", followed by it. n should be at
// least len(Ellipsis); below that a cut yields the bare "…".
func Within(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Prefix(s, n-len(Ellipsis)) + Ellipsis
}

// Chars bounds s to n characters (runes), the marker included: s when it
// fits, else its first n-1 characters followed by "…". It is for limits
// counted in characters, such as Slack's plain_text fields; n should be at
// least 1.
func Chars(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, k := 0, 0
	for k < n-1 && i < len(s) {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		k++
	}
	return s[:i] + Ellipsis
}

// Line is the first line of s (up to the first '\n'), bounded like To: the
// form of an error or a reason in one line of a log, a notice or a table.
func Line(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return To(s, n)
}
