package agent

import (
	"testing"

	"github.com/relaystation/relay/envelope"
	slackmapper "github.com/relaystation/relay/mappers/slack"
)

// TestSwitchCommands: `/relay stop`, `/relay resume` and `/relay connect
// <server>` are the approvals worker's; the model never gets them, but it
// gets other commands.
func TestSwitchCommands(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]bool{"stop": true, "Resume": true, "connect github": true, "connect": true,
		"stop the build": false, "summarize the thread": false} {
		e := envelope.New(envelope.ChannelSlack, envelope.RoleUser, text)
		e.Meta.Source = &envelope.Source{Event: "command"}
		e.Meta.Set(slackmapper.MetaKey, map[string]any{"text": text})
		if got := switchCommand(e); got != want {
			t.Errorf("%q: got %v, want %v", text, got, want)
		}
	}
}
