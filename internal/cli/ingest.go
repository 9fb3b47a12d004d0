package cli

import (
	"context"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/services/ingest"
)

func init() {
	registerService(&service{
		name:      "ingest",
		summary:   "webhook gateway: verified GitHub, Slack, Sentry, OpenProject webhooks become envelopes on relay.in.*",
		configure: configureIngest,
	})
}

// configureIngest reads the gateway's settings (ingest.ReadSettings) and
// builds the gateway, its webhook routes mounted on the HTTP server.
func configureIngest(env *config.Env) buildFunc {
	s := ingest.ReadSettings(env)
	return func(_ context.Context, d *deps) (*runner, error) {
		providers := make([]mappers.Provider, 0, len(s.Providers))
		for _, p := range s.Providers {
			if !p.Secret.IsSet() {
				d.Log.Warn("no webhook secret configured: every request is refused with 401", "provider", p.Name, "set", p.SecretVar)
			}
			providers = append(providers, p.New())
		}
		cfg := s.Config
		cfg.Registerer, cfg.Logger = d.Registry, d.Log
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
