package ingest

import (
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/config/configtest"
)

func TestReadSettings(t *testing.T) {
	t.Parallel()
	configtest.Run(t, ReadSettings, []configtest.Case[Settings]{
		{Name: "providers and limits", Env: map[string]string{
			"GITHUB_WEBHOOK_SECRET":           "gh-secret",
			"RELAY_INGEST_MAX_BODY_SLACK":     "2048",
			"RELAY_INGEST_DEADLINE_SENTRY":    "2s",
			"RELAY_INGEST_MAX_INFLIGHT_BYTES": "2097152",
			"RELAY_INGEST_HOLD_SLACK":         "2s",
			"RELAY_INGEST_MAX_HELD":           "16",
		}, Check: func(s Settings) bool {
			var names []string
			for _, p := range s.Providers {
				names = append(names, p.Name)
				if p.New().Name() != p.Name || p.Secret.IsSet() != (p.Name == "github") {
					return false
				}
			}
			l := s.Config.Limits
			return strings.Join(names, ",") == "github,slack,sentry,openproject" &&
				l["slack"].MaxBody == 2048 && l["sentry"].Deadline == 2*time.Second && l["slack"].Hold == 2*time.Second &&
				l["github"].MaxBody == DefaultLimits["github"].MaxBody && l["github"].Hold == 0 &&
				s.Config.MaxInflightBytes == 2<<20 && s.Config.MaxHeld == 16
		}},
		{Name: "deadline too long and URL not http", Env: map[string]string{"RELAY_INGEST_DEADLINE_GITHUB": "5m", "OPENPROJECT_URL": "ftp://x", "RELAY_INGEST_HOLD_SLACK": "1ms"},
			WantErr: []string{"RELAY_INGEST_DEADLINE_GITHUB", "OPENPROJECT_URL", "RELAY_INGEST_HOLD_SLACK"}},
	})
}
