package ingest

import (
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/testenv"
)

func TestReadSettings(t *testing.T) {
	t.Parallel()
	env := config.FromMap(map[string]string{
		"GITHUB_WEBHOOK_SECRET":           "gh-secret",
		"RELAY_INGEST_MAX_BODY_SLACK":     "2048",
		"RELAY_INGEST_DEADLINE_SENTRY":    "2s",
		"RELAY_INGEST_MAX_INFLIGHT_BYTES": "2097152",
	})
	s := ReadSettings(env)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range s.Providers {
		names = append(names, p.Name)
		if got := p.New().Name(); got != p.Name {
			t.Errorf("provider %s builds %q", p.Name, got)
		}
		if p.Secret.IsSet() != (p.Name == "github") {
			t.Errorf("provider %s: secret set %v", p.Name, p.Secret.IsSet())
		}
	}
	if got := strings.Join(names, ","); got != "github,slack,sentry,openproject" {
		t.Errorf("providers: got %s, want github,slack,sentry,openproject", got)
	}
	l := s.Config.Limits
	if l["slack"].MaxBody != 2048 || l["sentry"].Deadline != 2*time.Second || l["github"] != DefaultLimits["github"] ||
		s.Config.MaxInflightBytes != 2<<20 {
		t.Errorf("got limits %+v, inflight %d", l, s.Config.MaxInflightBytes)
	}
	bad := config.FromMap(map[string]string{"RELAY_INGEST_DEADLINE_GITHUB": "5m", "OPENPROJECT_URL": "ftp://x"})
	ReadSettings(bad)
	testenv.ErrorNames(t, bad.Err(), "RELAY_INGEST_DEADLINE_GITHUB", "OPENPROJECT_URL")
}
