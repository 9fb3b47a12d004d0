package approvals

import (
	"testing"

	"github.com/relaystation/relay/config/configtest"
)

func TestReadSettings(t *testing.T) {
	t.Parallel()
	configtest.Run(t, ReadSettings, []configtest.Case[Settings]{
		{Name: "off without token and channel", Env: map[string]string{}, Check: func(s Settings) bool {
			return !s.Enabled && !s.AppToken.IsSet() && s.Config.Concurrency == 8
		}},
		{Name: "on, with per-destination channels and Socket Mode", Env: map[string]string{
			"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APPROVAL_CHANNEL": "C0APPROVE", "RELAY_APPROVAL_CHANNEL_GITHUB": "G0GITHUB",
			"SLACK_APPROVERS": "U0ONE,S0GROUP", "SLACK_APP_TOKEN": "xapp-1-abc",
		}, Check: func(s Settings) bool {
			return s.Enabled && s.AppToken.IsSet() && s.Config.Channels["github"] == "G0GITHUB" && len(s.Config.Approvers) == 2
		}},
		{Name: "bad ids", Env: map[string]string{"SLACK_APPROVAL_CHANNEL": "general", "RELAY_APPROVAL_CHANNEL_SENTRY": "#x", "SLACK_APPROVERS": "bob"},
			WantErr: []string{"SLACK_APPROVAL_CHANNEL", "RELAY_APPROVAL_CHANNEL_SENTRY", "SLACK_APPROVERS"}},
		{Name: "bot token as app token", Env: map[string]string{"SLACK_APP_TOKEN": "xoxb-1"}, WantErr: []string{"SLACK_APP_TOKEN"}},
		{Name: "retention shorter than the TTL", Env: map[string]string{"RELAY_APPROVAL_TTL": "72h", "RELAY_APPROVAL_RETENTION": "48h"},
			WantErr: []string{"RELAY_APPROVAL_RETENTION"}},
	})
}
