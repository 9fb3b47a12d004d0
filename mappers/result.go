package mappers

import (
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
)

// One is the Result of a mapping that publishes one envelope.
func One(subject, msgID string, e *envelope.Envelope) Result {
	return Result{Items: []Item{{Subject: subject, MsgID: msgID, Envelope: e}}}
}

// TrimStrings bounds every string value of m (not those nested in lists or
// maps) to n bytes with clip.To.
func TrimStrings(m map[string]any, n int) map[string]any {
	for k, v := range m {
		if s, ok := v.(string); ok {
			m[k] = clip.To(s, n)
		}
	}
	return m
}
