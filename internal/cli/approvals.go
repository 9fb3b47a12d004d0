package cli

import (
	"cmp"
	"context"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/services/approvals"
	"github.com/relaystation/relay/services/console"
	"github.com/relaystation/relay/services/outbound"
	"github.com/relaystation/relay/services/toolrunner"
)

func init() {
	registerService(&service{
		name:      "approvals",
		summary:   "Slack approvals: suggestions go to a Slack thread with Approve / Edit / Reject; approved answers go to out.*; Socket Mode with SLACK_APP_TOKEN",
		configure: configureApprovals,
	})
}

// configureApprovals reads the worker's settings (approvals.ReadSettings) and
// builds the worker, when enabled, and Socket Mode, when SLACK_APP_TOKEN is set.
func configureApprovals(env *config.Env) buildFunc {
	s := approvals.ReadSettings(env)
	// The preview links citations as outbound's posts do (RELAY_REF_BASE_URL).
	s.Config.RefURL = outbound.RefBaseURL(env.URL("RELAY_REF_BASE_URL", "http", "https"))
	cfg, appToken, enabled := s.Config, s.AppToken, s.Enabled
	// `/relay connect <server>`: links to the console, signed with
	// RELAY_SECRET_KEY, for the per-user servers of mcp.json.
	consoleURL := cmp.Or(console.PublicURL(env), console.DefaultPublicURL(env.String("RELAY_CONSOLE_ADDR", console.DefaultAddr)))
	if links := connectLinks(toolrunner.ReadSettings(env), consoleURL); links != nil {
		cfg.Connect = links
	}
	return func(ctx context.Context, d *deps) (*runner, error) {
		var runs []func(context.Context) error
		if enabled || cfg.ConsoleOnly() {
			cfg.Logger = d.Log
			st, err := toolrunner.OpenState(ctx, d.Bus)
			if err != nil {
				return nil, err
			}
			cfg.Stop = st
			svc, err := approvals.New(ctx, cfg, d.Bus, nil)
			if err != nil {
				return nil, err
			}
			runs = append(runs, svc.Run)
		} else {
			d.Log.Warn("approvals are off: set both SLACK_BOT_TOKEN and SLACK_APPROVAL_CHANNEL (or neither, for the console); suggestions wait in the stream until then")
		}
		if appToken.IsSet() {
			sm, err := approvals.NewSocketMode(approvals.SocketConfig{
				AppToken: appToken, BotToken: cfg.BotToken, APIURL: cfg.APIURL, Logger: d.Log.With("component", "socketmode"),
			}, d.Bus)
			if err != nil {
				return nil, err
			}
			runs = append(runs, sm.Run)
		}
		return &runner{run: func(ctx context.Context) error { return runApprovals(ctx, runs) }}, nil
	}
}

// runApprovals runs fns until ctx is cancelled or one fails; with none it waits for ctx.
func runApprovals(ctx context.Context, fns []func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(fns))
	for _, f := range fns {
		go func() {
			err := f(ctx)
			if err != nil {
				cancel()
			}
			errc <- err
		}()
	}
	if len(fns) == 0 {
		<-ctx.Done()
		return nil
	}
	var first error
	for range fns {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}
