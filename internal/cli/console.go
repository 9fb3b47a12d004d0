package cli

import (
	"context"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/services/console"
	"github.com/relaystation/relay/services/toolrunner"
)

func init() {
	registerService(&service{
		name:      "console",
		summary:   "the operator console on RELAY_CONSOLE_ADDR (default 127.0.0.1:8081): live events, stories, approvals, dead letters, tools",
		configure: configureConsole,
	})
}

// configureConsole reads the console's settings (console.ReadSettings) and
// builds it on the tool runners' shared state.
func configureConsole(env *config.Env) buildFunc {
	cfg := console.ReadSettings(env).Config
	return func(ctx context.Context, d *deps) (*runner, error) {
		cfg.Logger = d.Log.With("service", "console")
		st, err := toolrunner.OpenState(ctx, d.Bus)
		if err != nil {
			return nil, err
		}
		cfg.Tools = st
		svc, err := console.New(cfg, d.Bus)
		if err != nil {
			return nil, err
		}
		return &runner{run: svc.Run}, nil
	}
}
