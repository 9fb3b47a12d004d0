package mappers

import (
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/secret"
)

// RedactedCredential replaces a credential found in a webhook's text.
const RedactedCredential = "[REDACTED]"

// RedactCredentials replaces the credentials that people paste into issues,
// comments and messages (the shapes of secret.TokenPattern: GitHub, Slack,
// GitLab and sk- tokens, AWS keys, JWTs, PEM private keys) in e's content and
// in the strings of its meta.facts, and reports how many it replaced. The
// gateway applies it before an envelope is stored, so such a credential
// reaches neither the bus nor the model, memory, Slack or the logs.
// "Bearer x" phrases are left alone: in prose, "token expiry" looks the same.
func RedactCredentials(e *envelope.Envelope) int {
	var n int
	e.Content, n = secret.RedactTokens(e.Content, RedactedCredential)
	facts, _ := e.Meta.Extra[FactsKey].(map[string]any)
	for k, v := range facts {
		switch v := v.(type) {
		case string:
			var m int
			facts[k], m = secret.RedactTokens(v, RedactedCredential)
			n += m
		case []any:
			for i, s := range v {
				if s, ok := s.(string); ok {
					var m int
					v[i], m = secret.RedactTokens(s, RedactedCredential)
					n += m
				}
			}
		}
	}
	return n
}
