package secret

import (
	"regexp"
	"strings"
)

// TokenPattern matches the common shapes of credentials that turn up in
// text: GitHub tokens (classic and fine-grained), Slack bot, user and app
// tokens, OpenAI/Anthropic-style sk- keys, GitLab tokens, AWS access key ids
// and secret keys, JWTs, and PEM private keys (to the end of the text when the
// END line is missing). The tool runner redacts results with it and memory
// scrubs long-term memories with it.
var TokenPattern = regexp.MustCompile(`\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}\b` +
	`|\bgithub_pat_[A-Za-z0-9_]{20,}\b` +
	`|\bxox[abeposr]-[A-Za-z0-9-]{10,}\b` +
	`|\bxapp-[A-Za-z0-9-]{10,}\b` +
	`|\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b` +
	`|\bglpat-[A-Za-z0-9_-]{20,}\b` +
	`|\b(?:AKIA|ASIA)[A-Z0-9]{16}\b` +
	`|(?i:aws_secret_access_key)["']?\s*[:=]\s*["']?[A-Za-z0-9/+=]{40}` +
	`|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b` +
	`|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)`)

// tokenHints are substrings every TokenPattern shape contains.
var tokenHints = []string{"gh", "github_pat_", "xox", "xapp-", "sk-", "glpat-", "AKIA", "ASIA",
	"ws_secret_access_key", "WS_SECRET_ACCESS_KEY", "eyJ", "PRIVATE KEY"}

// MayHoldToken is a cheap pre-check: false means TokenPattern cannot match s.
func MayHoldToken(s string) bool {
	for _, h := range tokenHints {
		if strings.Contains(s, h) {
			return true
		}
	}
	return false
}
