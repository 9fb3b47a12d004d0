package memtest

import (
	"github.com/google/uuid"

	"github.com/relaystation/relay/envelope"
)

// Envelope is a GitHub envelope of role with content in thread, for the
// memory tests' turns.
func Envelope(thread string, role envelope.Role, content string) *envelope.Envelope {
	e := envelope.New(envelope.ChannelGitHub, role, content)
	e.Meta.Thread = thread
	return e
}

// Thread is prefix with a short random suffix: a thread no other test uses.
func Thread(prefix string) string { return prefix + uuid.NewString()[:6] }
