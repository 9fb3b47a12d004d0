package cli

import (
	"context"
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/ingest"
)

func init() {
	registerService(&service{
		name:      "ingest",
		summary:   "webhook gateway: verified GitHub, Slack, Sentry, OpenProject webhooks become envelopes on relay.in.*",
		configure: configureIngest,
	})
}

// ingestProviders are the providers the gateway routes, with the variable of
// their verification secret; build reads any further settings from env and
// returns the constructor.
var ingestProviders = []struct {
	name, secretVar string
	build           func(env *config.Env, s secret.Value) func() mappers.Provider
}{
	{"github", "GITHUB_WEBHOOK_SECRET", func(_ *config.Env, s secret.Value) func() mappers.Provider {
		return func() mappers.Provider { return github.New(github.Config{Secret: s}) }
	}},
	{"slack", "SLACK_SIGNING_SECRET", func(_ *config.Env, s secret.Value) func() mappers.Provider {
		return func() mappers.Provider { return slack.New(slack.Config{Secret: s}) }
	}},
	{"sentry", "SENTRY_CLIENT_SECRET", func(env *config.Env, s secret.Value) func() mappers.Provider {
		org := env.String("SENTRY_ORG", "")
		return func() mappers.Provider { return sentry.New(sentry.Config{Secret: s, Org: org}) }
	}},
	{"openproject", "OPENPROJECT_WEBHOOK_SECRET", func(env *config.Env, s secret.Value) func() mappers.Provider {
		base := env.URL("OPENPROJECT_URL", "http", "https")
		return func() mappers.Provider { return openproject.New(openproject.Config{Secret: s, BaseURL: base}) }
	}},
}

// configureIngest reads, per provider P: the secret, RELAY_INGEST_MAX_BODY_P
// (bytes) and RELAY_INGEST_DEADLINE_P (how long the provider waits for an
// answer); and RELAY_INGEST_MAX_INFLIGHT_BYTES.
func configureIngest(env *config.Env) buildFunc {
	cfg := ingest.Config{Limits: map[string]ingest.Limits{}}
	secrets := map[string]secret.Value{}
	builds := map[string]func() mappers.Provider{}
	for _, p := range ingestProviders {
		secrets[p.name] = env.Secret(p.secretVar)
		builds[p.name] = p.build(env, secrets[p.name])
		def := ingest.DefaultLimits[p.name]
		up := strings.ToUpper(p.name)
		cfg.Limits[p.name] = ingest.Limits{
			MaxBody:  int64(env.Int("RELAY_INGEST_MAX_BODY_"+up, int(def.MaxBody), 1<<10, 1<<30)),
			Deadline: env.Duration("RELAY_INGEST_DEADLINE_"+up, def.Deadline, 100*time.Millisecond, time.Minute),
		}
	}
	cfg.MaxInflightBytes = int64(env.Int("RELAY_INGEST_MAX_INFLIGHT_BYTES", 256<<20, 1<<20, 1<<40))
	return func(_ context.Context, d *deps) (*runner, error) {
		log := d.Log.With("service", "ingest")
		providers := make([]mappers.Provider, 0, len(ingestProviders))
		for _, p := range ingestProviders {
			if !secrets[p.name].IsSet() {
				log.Warn("no webhook secret configured: every request is refused with 401", "provider", p.name, "set", p.secretVar)
			}
			providers = append(providers, builds[p.name]())
		}
		cfg.Registerer = d.Registry
		cfg.Logger = log
		svc, err := ingest.New(cfg, d.Bus, providers...)
		if err != nil {
			return nil, err
		}
		return &runner{
			routes: func(s *httpserver.Server) { svc.Mount(s.Echo) },
			run:    svc.Run,
		}, nil
	}
}
