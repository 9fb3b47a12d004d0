package cli

import (
	"context"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/services/outbound"
)

func init() {
	registerService(&service{
		name:      "outbound",
		summary:   "posts approved answers (relay.out.*) and task notices (relay.agent.notice) to Slack, GitHub, Sentry, OpenProject and signed webhooks",
		configure: configureOutbound,
	})
}

// configureOutbound reads the worker's settings (outbound.ReadSettings) and
// builds the worker with a client per configured destination.
func configureOutbound(env *config.Env) buildFunc {
	s := outbound.ReadSettings(env)
	return func(ctx context.Context, d *deps) (*runner, error) {
		cfg, err := s.Build(d.Log)
		if err != nil {
			return nil, err
		}
		cfg.Registerer, cfg.Logger = d.Registry, d.Log
		return runnerOf(outbound.New(ctx, cfg, d.Bus))
	}
}
