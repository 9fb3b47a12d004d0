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
				l["slack"].MaxBody == 2048 && l["sentry"].Deadline == 2*time.Second && l["github"] == DefaultLimits["github"] &&
				s.Config.MaxInflightBytes == 2<<20
		}},
		{Name: "deadline too long and URL not http", Env: map[string]string{"RELAY_INGEST_DEADLINE_GITHUB": "5m", "OPENPROJECT_URL": "ftp://x"},
			WantErr: []string{"RELAY_INGEST_DEADLINE_GITHUB", "OPENPROJECT_URL"}},
	})
}
