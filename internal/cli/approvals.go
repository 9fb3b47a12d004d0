package cli

import (
	"context"
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/services/approvals"
	"github.com/relaystation/relay/services/outbound"
)

func init() {
	registerService(&service{
		name:      "approvals",
		summary:   "Slack approvals: suggestions go to a Slack thread with Approve / Edit / Reject; approved answers go to out.*; Socket Mode with SLACK_APP_TOKEN",
		configure: configureApprovals,
	})
}

// configureApprovals reads SLACK_BOT_TOKEN, SLACK_API_URL, SLACK_APPROVAL_CHANNEL,
// RELAY_APPROVAL_CHANNEL_{GITHUB,SENTRY,OPENPROJECT,WEBHOOK}, SLACK_APPROVERS,
// RELAY_APPROVAL_TTL, RELAY_APPROVAL_SWEEP, RELAY_APPROVAL_GROUP_CACHE,
// RELAY_APPROVAL_RETENTION, RELAY_APPROVAL_CONCURRENCY, RELAY_REF_BASE_URL (the
// preview links citations as posts do) and SLACK_APP_TOKEN.
// Without a bot token and an approval channel the worker is off (suggestions
// wait in the stream); Socket Mode runs whenever SLACK_APP_TOKEN is set.
func configureApprovals(env *config.Env) buildFunc {
	cfg := approvals.Config{
		BotToken:      env.Secret("SLACK_BOT_TOKEN"),
		APIURL:        env.URL("SLACK_API_URL", "http", "https"),
		Channel:       env.String("SLACK_APPROVAL_CHANNEL", ""),
		Channels:      map[string]string{},
		Approvers:     env.List("SLACK_APPROVERS"),
		TTL:           env.Duration("RELAY_APPROVAL_TTL", 24*time.Hour, time.Second, 90*24*time.Hour),
		SweepInterval: env.Duration("RELAY_APPROVAL_SWEEP", time.Minute, time.Second, time.Hour),
		GroupCacheTTL: env.Duration("RELAY_APPROVAL_GROUP_CACHE", 5*time.Minute, time.Second, 24*time.Hour),
		Retention:     env.Duration("RELAY_APPROVAL_RETENTION", 30*24*time.Hour, time.Hour, 365*24*time.Hour),
		Concurrency:   env.Int("RELAY_APPROVAL_CONCURRENCY", 8, 1, 256),
		RefURL:        outbound.RefBaseURL(env.URL("RELAY_REF_BASE_URL", "http", "https")),
	}
	if cfg.Channel != "" && !approvals.ValidChannelID(cfg.Channel) {
		env.Failf("SLACK_APPROVAL_CHANNEL", "%q is not a Slack channel id (C…, G…)", cfg.Channel)
	}
	for _, t := range approvals.TargetChannels {
		name := "RELAY_APPROVAL_CHANNEL_" + strings.ToUpper(t)
		if ch := env.String(name, ""); ch != "" {
			if !approvals.ValidChannelID(ch) {
				env.Failf(name, "%q is not a Slack channel id (C…, G…)", ch)
			}
			cfg.Channels[t] = ch
		}
	}
	for _, a := range cfg.Approvers {
		if !approvals.ValidApprover(a) {
			env.Failf("SLACK_APPROVERS", "%q is not a Slack user id (U…, W…) or user-group id (S…)", a)
		}
	}
	appToken := env.Secret("SLACK_APP_TOKEN")
	if appToken.IsSet() && !strings.HasPrefix(appToken.Reveal(), "xapp-") {
		env.Failf("SLACK_APP_TOKEN", "not an app-level token (want xapp-…)")
	}
	enabled := cfg.BotToken.IsSet() && cfg.Channel != ""
	if cfg.TTL > cfg.Retention {
		env.Failf("RELAY_APPROVAL_RETENTION", "%s is shorter than RELAY_APPROVAL_TTL %s", cfg.Retention, cfg.TTL)
	}
	return func(ctx context.Context, d *deps) (*runner, error) {
		log := d.Log.With("service", "approvals")
		var runs []func(context.Context) error
		if enabled {
			cfg.Logger = log
			svc, err := approvals.New(ctx, cfg, d.Bus, nil)
			if err != nil {
				return nil, err
			}
			runs = append(runs, svc.Run)
		} else {
			log.Warn("approvals are off: set SLACK_BOT_TOKEN and SLACK_APPROVAL_CHANNEL; suggestions wait in the stream until then")
		}
		if appToken.IsSet() {
			sm, err := approvals.NewSocketMode(approvals.SocketConfig{
				AppToken: appToken, BotToken: cfg.BotToken, APIURL: cfg.APIURL, Logger: log.With("component", "socketmode"),
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
