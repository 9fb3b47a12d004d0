package agent

import (
	"strings"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// LocationOf is where an inbound envelope was written, for the policy's
// bindings: a Slack workspace and channel, a GitHub organisation and
// repository, a Sentry or OpenProject project; zero when it names none.
func LocationOf(e *envelope.Envelope) mcpconfig.Location {
	switch e.Channel {
	case envelope.ChannelGitHub:
		_, rest, _ := strings.Cut(e.Meta.Thread, ":")
		path, _, _ := strings.Cut(rest, "#")
		if owner, _, ok := strings.Cut(path, "/"); ok && owner != "" {
			return mcpconfig.Location{Provider: mcpconfig.ProviderGitHub, Parent: owner, Place: path}
		}
	case envelope.ChannelSlack:
		if t, err := envelope.TargetOf(e); err == nil && t.SlackCh != "" {
			return mcpconfig.Location{Provider: mcpconfig.ProviderSlack, Parent: t.Team, Place: t.SlackCh}
		}
	case envelope.ChannelSentry, envelope.ChannelOpenProject:
		m, _ := e.Meta.Extra[string(e.Channel)].(map[string]any)
		if p, _ := m["project"].(string); p != "" {
			return mcpconfig.Location{Provider: string(e.Channel), Place: p}
		}
	}
	return mcpconfig.Location{}
}
