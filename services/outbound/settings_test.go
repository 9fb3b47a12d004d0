package outbound

import (
	"maps"
	"strings"
	"testing"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/config/configtest"
	"github.com/relaystation/relay/mappers/webhook"
	"github.com/relaystation/relay/secret"
)

func TestReadSettings(t *testing.T) {
	t.Parallel()
	// builds reports whether s builds a Config for which ok holds.
	builds := func(s Settings, ok func(Config) bool) bool {
		cfg, err := s.Build(nil)
		return err == nil && ok(cfg)
	}
	configtest.Run(t, ReadSettings, []configtest.Case[Settings]{
		{Name: "nothing configured names every variable", Env: map[string]string{}, Check: func(s Settings) bool {
			return builds(s, func(c Config) bool {
				return maps.Equal(c.Missing, map[string]string{
					DestSlack:       "SLACK_BOT_TOKEN is not set",
					DestGitHub:      "GITHUB_TOKEN is not set",
					DestSentry:      "SENTRY_TOKEN is not set",
					DestOpenProject: "OPENPROJECT_URL and OPENPROJECT_TOKEN are not set",
					DestWebhook:     "RELAY_WEBHOOK_SECRET is not set",
				}) && c.Slack == nil && c.GitHub == nil && c.Webhook == nil
			})
		}},
		{Name: "every destination configured", Env: map[string]string{
			"SLACK_BOT_TOKEN": "xoxb-1", "GITHUB_TOKEN": "ghp_1", "SENTRY_TOKEN": "s", "OPENPROJECT_URL": "https://op.example",
			"OPENPROJECT_TOKEN": "o", "RELAY_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "RELAY_OUTBOUND_CONCURRENCY": "7",
		}, Check: func(s Settings) bool {
			return builds(s, func(c Config) bool {
				return len(c.Missing) == 0 && c.Slack != nil && c.GitHub != nil && c.Sentry != nil && c.OpenProject != nil &&
					c.Webhook != nil && c.Concurrency == 7
			})
		}},
		{Name: "OpenProject without its token", Env: map[string]string{"OPENPROJECT_URL": "https://op.example"}, Check: func(s Settings) bool {
			return builds(s, func(c Config) bool {
				return c.Missing[DestOpenProject] == "OPENPROJECT_TOKEN is not set" && c.OpenProject == nil
			})
		}},
		{Name: "bad webhook secret", Env: map[string]string{"RELAY_WEBHOOK_SECRET": "nope"}, WantErr: []string{"RELAY_WEBHOOK_SECRET"}},
		{Name: "bad concurrency", Env: map[string]string{"RELAY_OUTBOUND_CONCURRENCY": "0"}, WantErr: []string{"RELAY_OUTBOUND_CONCURRENCY"}},
	})
}

// The webhook key is redacted also without its whsec_ prefix, the form
// receivers write it in.
func TestWebhookKeyRedactedWithoutPrefix(t *testing.T) {
	t.Parallel()
	const key = "Q2FuYXJ5S2V5Rm9yT3V0Ym91bmRXZWJob29rcw"
	ReadSettings(config.FromMap(map[string]string{"RELAY_WEBHOOK_SECRET": webhook.SecretPrefix + key}))
	if got, _ := secret.RedactKnown("the key is " + key); strings.Contains(got, key) {
		t.Errorf("got %q, want the bare webhook key redacted", got)
	}
}
