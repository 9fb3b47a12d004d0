package ingest

import (
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
)

// Settings are the gateway's settings from the environment.
type Settings struct {
	// Config is the gateway's configuration, without Logger and Registerer.
	Config Config
	// Providers are the routed providers, in a fixed order.
	Providers []ProviderSettings
}

// ProviderSettings are one provider's settings.
type ProviderSettings struct {
	Name string
	// SecretVar names the variable of the verification secret; a provider
	// without one refuses every request with 401.
	SecretVar string
	Secret    secret.Value
	// New builds the provider's verifier and mapper.
	New func() mappers.Provider
}

// providerSettings are the providers the gateway routes, with the variable of their
// verification secret; build reads any further settings from env and returns
// the constructor.
var providerSettings = []struct {
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

// ReadSettings reads, per provider P: the secret, RELAY_INGEST_MAX_BODY_P
// (bytes), RELAY_INGEST_DEADLINE_P (how long the provider waits for an
// answer) and RELAY_INGEST_HOLD_P (how long a request is held while the bus
// cannot take it: GitHub 9s, Slack 2.5s, Sentry 800ms, OpenProject 9s);
// SENTRY_ORG, OPENPROJECT_URL, RELAY_INGEST_MAX_INFLIGHT_BYTES and
// RELAY_INGEST_MAX_HELD (requests held at once, default 1024) and
// RELAY_INGEST_MAX_INFLIGHT_PER_SOURCE (publishes of one source at once,
// default 256, 0 off).
// Problems are recorded in env.
func ReadSettings(env *config.Env) Settings {
	s := Settings{Config: Config{Limits: map[string]Limits{}}}
	for _, p := range providerSettings {
		sec := env.Secret(p.secretVar)
		s.Providers = append(s.Providers, ProviderSettings{Name: p.name, SecretVar: p.secretVar, Secret: sec, New: p.build(env, sec)})
		def := DefaultLimits[p.name]
		up := strings.ToUpper(p.name)
		s.Config.Limits[p.name] = Limits{
			MaxBody:  int64(env.Int("RELAY_INGEST_MAX_BODY_"+up, int(def.MaxBody), 1<<10, 1<<30)),
			Deadline: env.Duration("RELAY_INGEST_DEADLINE_"+up, def.Deadline, 100*time.Millisecond, time.Minute),
			// 0: the default, capped to the deadline's publishing share.
			Hold: env.Duration("RELAY_INGEST_HOLD_"+up, 0, 50*time.Millisecond, time.Minute),
		}
	}
	s.Config.MaxInflightBytes = int64(env.Int("RELAY_INGEST_MAX_INFLIGHT_BYTES", 256<<20, 1<<20, 1<<40))
	s.Config.MaxHeld = env.Int("RELAY_INGEST_MAX_HELD", 1024, 1, 1<<20)
	// 0 turns the limit off (Config: negative).
	if s.Config.MaxInflightPerSource = env.Int("RELAY_INGEST_MAX_INFLIGHT_PER_SOURCE", DefaultMaxInflightPerSource, 0, 1<<20); s.Config.MaxInflightPerSource == 0 {
		s.Config.MaxInflightPerSource = -1
	}
	return s
}
