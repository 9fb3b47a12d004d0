package outbound

import (
	"strings"
	"testing"

	"github.com/relaystation/relay/config"
)

func TestReadSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		env         map[string]string
		wantErr     string
		wantMissing map[string]string
		configured  func(Config) bool
	}{
		{
			name: "nothing configured names every variable",
			env:  map[string]string{},
			wantMissing: map[string]string{
				DestSlack:       "SLACK_BOT_TOKEN is not set",
				DestGitHub:      "GITHUB_TOKEN is not set",
				DestSentry:      "SENTRY_TOKEN is not set",
				DestOpenProject: "OPENPROJECT_URL and OPENPROJECT_TOKEN are not set",
				DestWebhook:     "RELAY_WEBHOOK_SECRET is not set",
			},
			configured: func(c Config) bool { return c.Slack == nil && c.GitHub == nil && c.Webhook == nil },
		},
		{
			name: "every destination configured",
			env: map[string]string{
				"SLACK_BOT_TOKEN": "xoxb-1", "GITHUB_TOKEN": "ghp_1", "SENTRY_TOKEN": "s", "OPENPROJECT_URL": "https://op.example",
				"OPENPROJECT_TOKEN": "o", "RELAY_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "RELAY_OUTBOUND_CONCURRENCY": "7",
			},
			wantMissing: map[string]string{},
			configured: func(c Config) bool {
				return c.Slack != nil && c.GitHub != nil && c.Sentry != nil && c.OpenProject != nil && c.Webhook != nil && c.Concurrency == 7
			},
		},
		{
			name:        "OpenProject without its token",
			env:         map[string]string{"OPENPROJECT_URL": "https://op.example"},
			wantMissing: map[string]string{DestOpenProject: "OPENPROJECT_TOKEN is not set"},
			configured:  func(c Config) bool { return c.OpenProject == nil },
		},
		{name: "bad webhook secret", env: map[string]string{"RELAY_WEBHOOK_SECRET": "nope"}, wantErr: "RELAY_WEBHOOK_SECRET"},
		{name: "bad concurrency", env: map[string]string{"RELAY_OUTBOUND_CONCURRENCY": "0"}, wantErr: "RELAY_OUTBOUND_CONCURRENCY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := config.FromMap(tc.env)
			s := ReadSettings(env)
			if tc.wantErr != "" {
				if err := env.Err(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err := env.Err(); err != nil {
				t.Fatal(err)
			}
			cfg, err := s.Build(nil)
			if err != nil {
				t.Fatal(err)
			}
			for dest, want := range tc.wantMissing {
				if cfg.Missing[dest] != want {
					t.Errorf("Missing[%s]: got %q, want %q", dest, cfg.Missing[dest], want)
				}
			}
			if len(tc.wantMissing) == 0 && len(cfg.Missing) != 0 {
				t.Errorf("Missing: got %v, want none", cfg.Missing)
			}
			if !tc.configured(cfg) {
				t.Errorf("got config %+v", cfg)
			}
		})
	}
}
