package approvals

import (
	"strings"
	"testing"

	"github.com/relaystation/relay/config"
)

func TestReadSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr []string
		check   func(Settings) bool
	}{
		{name: "off without token and channel", env: map[string]string{}, check: func(s Settings) bool {
			return !s.Enabled && !s.AppToken.IsSet() && s.Config.Concurrency == 8
		}},
		{name: "on, with per-destination channels and Socket Mode", env: map[string]string{
			"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APPROVAL_CHANNEL": "C0APPROVE", "RELAY_APPROVAL_CHANNEL_GITHUB": "G0GITHUB",
			"SLACK_APPROVERS": "U0ONE,S0GROUP", "SLACK_APP_TOKEN": "xapp-1-abc",
		}, check: func(s Settings) bool {
			return s.Enabled && s.AppToken.IsSet() && s.Config.Channels["github"] == "G0GITHUB" && len(s.Config.Approvers) == 2
		}},
		{name: "bad ids", env: map[string]string{"SLACK_APPROVAL_CHANNEL": "general", "RELAY_APPROVAL_CHANNEL_SENTRY": "#x", "SLACK_APPROVERS": "bob"},
			wantErr: []string{"SLACK_APPROVAL_CHANNEL", "RELAY_APPROVAL_CHANNEL_SENTRY", "SLACK_APPROVERS"}},
		{name: "bot token as app token", env: map[string]string{"SLACK_APP_TOKEN": "xoxb-1"}, wantErr: []string{"SLACK_APP_TOKEN"}},
		{name: "retention shorter than the TTL", env: map[string]string{"RELAY_APPROVAL_TTL": "72h", "RELAY_APPROVAL_RETENTION": "48h"},
			wantErr: []string{"RELAY_APPROVAL_RETENTION"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := config.FromMap(tc.env)
			s := ReadSettings(env)
			err := env.Err()
			if len(tc.wantErr) > 0 {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("got error %v, want one naming %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(s) {
				t.Errorf("got %+v", s)
			}
		})
	}
}
