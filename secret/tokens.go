package secret

import (
	"regexp"
	"strings"
)

// TokenPattern matches the common shapes of credentials that turn up in
// text: GitHub tokens (classic and fine-grained), Slack bot, user and app
// tokens, OpenAI/Anthropic-style sk- keys, webhook signing secrets (whsec_), GitLab tokens, AWS access key ids
// and secret keys, JWTs, and PEM private keys (to the end of the text when the
// END line is missing). The tool runner redacts results with it and memory
// scrubs long-term memories with it.
var TokenPattern = regexp.MustCompile(`\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}\b` +
	`|\bgithub_pat_[A-Za-z0-9_]{20,}\b` +
	`|\bxox[abeposr]-[A-Za-z0-9-]{10,}\b` +
	`|\bxapp-[A-Za-z0-9-]{10,}\b` +
	`|\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b` +
	`|\bglpat-[A-Za-z0-9_-]{20,}\b` +
	`|\bwhsec_[A-Za-z0-9+/=]{20,}` +
	`|\b(?:AKIA|ASIA)[A-Z0-9]{16}\b` +
	`|` + asciiFold("aws_secret_access_key") + `["']?\s*[:=]\s*["']?[A-Za-z0-9/+=]{40}` +
	`|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b` +
	`|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)`)

// A hint is a literal that every match of one TokenPattern shape holds,
// found from one of its bytes that is rare in prose (an underscore, a dash,
// a capital J) rather than from its first, which would stop the search at
// nearly every "s" or "e" of a text.
type hint struct {
	lit  string
	at   int  // index in lit of the byte searched for
	word bool // the shape starts at a word boundary ("sk-" in "task-list" is no key)
	fold bool // in any ASCII case
}

var (
	underscoreHints = []hint{{"ghp_", 3, true, false}, {"gho_", 3, true, false}, {"ghu_", 3, true, false},
		{"ghs_", 3, true, false}, {"ghr_", 3, true, false}, {"github_pat_", 6, true, false},
		{"aws_secret_access_key", 3, false, true}, {"whsec_", 5, true, false}}
	dashHints = []hint{{"sk-", 2, true, false}, {"xapp-", 4, true, false}, {"glpat-", 5, true, false},
		{"xoxa-", 4, true, false}, {"xoxb-", 4, true, false}, {"xoxe-", 4, true, false}, {"xoxp-", 4, true, false},
		{"xoxo-", 4, true, false}, {"xoxs-", 4, true, false}, {"xoxr-", 4, true, false}}
	jwtHints = []hint{{"eyJ", 2, true, false}}
)

// MayHoldToken is a cheap pre-check: false means TokenPattern cannot match s.
// It rules out most prose, which matters: the pattern itself reads a few
// megabytes a second.
func MayHoldToken(s string) bool {
	return holdsHint(s, '_', underscoreHints) || holdsHint(s, '-', dashHints) || holdsHint(s, 'J', jwtHints) ||
		atWordStart(s, "AKIA") || atWordStart(s, "ASIA") || strings.Contains(s, "PRIVATE KEY")
}

// holdsHint reports whether s holds one of hints around an occurrence of
// the byte c (each hint's lit[at] is c).
func holdsHint(s string, c byte, hints []hint) bool {
	for i := 0; ; {
		j := strings.IndexByte(s[i:], c)
		if j < 0 {
			return false
		}
		for _, h := range hints {
			p := i + j - h.at
			if p < 0 || len(s)-p < len(h.lit) || h.word && p > 0 && isWordByte(s[p-1]) {
				continue
			}
			if h.fold && strings.EqualFold(s[p:p+len(h.lit)], h.lit) || !h.fold && s[p:p+len(h.lit)] == h.lit {
				return true
			}
		}
		i += j + 1
	}
}

// atWordStart reports whether s holds h where no ASCII word character
// (regexp's \b) comes before it.
func atWordStart(s, h string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], h)
		if j < 0 {
			return false
		}
		if p := i + j; p == 0 || !isWordByte(s[p-1]) {
			return true
		}
		i += j + 1
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// RedactTokens replaces every TokenPattern match in s with repl and reports
// how many it replaced.
func RedactTokens(s, repl string) (string, int) {
	if !MayHoldToken(s) {
		return s, 0
	}
	n := 0
	s = TokenPattern.ReplaceAllStringFunc(s, func(string) string { n++; return repl })
	return s, n
}

// BearerPattern matches a credential after an authorization scheme word, as
// in an Authorization header copied into a log or an error: "Bearer x",
// "Basic x" or "token x" (GitHub's scheme) with a credential of at least 8
// characters. Group 1 is the scheme word, group 2 the space after it; the
// rest of the match is the credential. The tool runner and memory both redact
// with it (RedactBearer).
var BearerPattern = regexp.MustCompile(`\b(` + asciiFold("bearer") + `|` + asciiFold("basic") + `|` + asciiFold("token") +
	`)(\s+)[A-Za-z0-9\-._~+/=]{8,}`)

// asciiFold matches word in any ASCII case; (?i) would also match the Kelvin
// sign for k and the long s for s, which MayHoldBearer does not look for.
func asciiFold(word string) string {
	var b strings.Builder
	for _, c := range word {
		b.WriteString("[" + strings.ToUpper(string(c)) + string(c) + "]")
	}
	return b.String()
}

// MayHoldBearer is a cheap pre-check: false means BearerPattern cannot match s.
func MayHoldBearer(s string) bool {
	return anchored(s, 'b', 0, "bearer", "basic") || anchored(s, 'k', 2, "token")
}

// anchored reports whether s holds one of words (lower-case ASCII, matched in
// any case) whose byte at off is anchor. It looks for the anchor first, in
// either case, with the fast strings.IndexByte.
func anchored(s string, anchor byte, off int, words ...string) bool {
	for _, c := range [2]byte{anchor, anchor - 'a' + 'A'} {
		for i := 0; ; {
			j := strings.IndexByte(s[i:], c)
			if j < 0 {
				break
			}
			if p := i + j - off; p >= 0 {
				for _, w := range words {
					if hasFold(s[p:], w) {
						return true
					}
				}
			}
			i += j + 1
		}
	}
	return false
}

// hasFold reports whether s starts with word (lower-case ASCII) in any case.
func hasFold(s, word string) bool {
	return len(s) >= len(word) && strings.EqualFold(s[:len(word)], word)
}

// RedactBearer replaces the credential of every BearerPattern match in s with
// repl, keeping the scheme word and its space, and returns how many it
// replaced.
func RedactBearer(s, repl string) (string, int) {
	if !MayHoldBearer(s) {
		return s, 0
	}
	n := 0
	out := BearerPattern.ReplaceAllStringFunc(s, func(m string) string {
		n++
		sub := BearerPattern.FindStringSubmatch(m)
		return sub[1] + sub[2] + repl
	})
	return out, n
}
