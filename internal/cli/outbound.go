package cli

import (
	"context"
	"strings"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/mappers/webhook"
	"github.com/relaystation/relay/services/outbound"
)

func init() {
	registerService(&service{
		name:      "outbound",
		summary:   "posts approved answers (relay.out.*) and task notices (relay.agent.notice) to Slack, GitHub, Sentry, OpenProject and signed webhooks",
		configure: configureOutbound,
	})
}

// configureOutbound reads the destinations' credentials (a destination
// without them is unconfigured: its messages are dead-lettered naming the
// variable), RELAY_WEBHOOK_SECRET, RELAY_REF_BASE_URL and
// RELAY_OUTBOUND_CONCURRENCY.
func configureOutbound(env *config.Env) buildFunc {
	slackToken := env.Secret("SLACK_BOT_TOKEN")
	slackURL := env.URL("SLACK_API_URL", "http", "https")
	ghToken := env.Secret("GITHUB_TOKEN")
	ghURL := env.URL("GITHUB_API_URL", "http", "https")
	sentryToken := env.Secret("SENTRY_TOKEN")
	sentryURL := env.URL("SENTRY_API_URL", "http", "https")
	opURL := env.URL("OPENPROJECT_URL", "http", "https")
	opToken := env.Secret("OPENPROJECT_TOKEN")
	whRaw := env.Secret("RELAY_WEBHOOK_SECRET")
	var whSecret webhook.Secret
	if whRaw.IsSet() {
		s, err := webhook.ParseSecret(whRaw.Reveal())
		if err != nil {
			env.Failf("RELAY_WEBHOOK_SECRET", "%v", err)
		}
		whSecret = s
	}
	refs := outbound.RefBaseURL(env.URL("RELAY_REF_BASE_URL", "http", "https"))
	cfg := outbound.Config{
		RefURL:      refs,
		Concurrency: env.Int("RELAY_OUTBOUND_CONCURRENCY", 4, 1, 256),
		Missing:     map[string]string{},
	}
	missing := func(dest string, vars ...string) {
		cfg.Missing[dest] = strings.Join(vars, " and ") + map[bool]string{true: " is not set", false: " are not set"}[len(vars) == 1]
	}
	return func(ctx context.Context, d *deps) (*runner, error) {
		log := d.Log.With("service", "outbound")
		var err error
		if slackToken.IsSet() {
			if cfg.Slack, err = slack.NewPoster(slack.PosterConfig{Token: slackToken, APIURL: slackURL, RefLink: refs, Logger: log}); err != nil {
				return nil, err
			}
		} else {
			missing(outbound.DestSlack, "SLACK_BOT_TOKEN")
		}
		if ghToken.IsSet() {
			if cfg.GitHub, err = github.NewCommenter(github.CommenterConfig{Token: ghToken, APIURL: ghURL, Logger: log}); err != nil {
				return nil, err
			}
		} else {
			missing(outbound.DestGitHub, "GITHUB_TOKEN")
		}
		if sentryToken.IsSet() {
			if cfg.Sentry, err = sentry.NewCommenter(sentry.CommenterConfig{Token: sentryToken, APIURL: sentryURL, Logger: log}); err != nil {
				return nil, err
			}
		} else {
			missing(outbound.DestSentry, "SENTRY_TOKEN")
		}
		switch {
		case opURL != "" && opToken.IsSet():
			if cfg.OpenProject, err = openproject.NewCommenter(openproject.CommenterConfig{BaseURL: opURL, Token: opToken, Logger: log}); err != nil {
				return nil, err
			}
		case opURL == "" && !opToken.IsSet():
			missing(outbound.DestOpenProject, "OPENPROJECT_URL", "OPENPROJECT_TOKEN")
		case opURL == "":
			missing(outbound.DestOpenProject, "OPENPROJECT_URL")
		default:
			missing(outbound.DestOpenProject, "OPENPROJECT_TOKEN")
		}
		if whSecret.IsSet() {
			if cfg.Webhook, err = webhook.NewSender(webhook.SenderConfig{Secret: whSecret}); err != nil {
				return nil, err
			}
		} else {
			missing(outbound.DestWebhook, "RELAY_WEBHOOK_SECRET")
		}
		cfg.Registerer = d.Registry
		cfg.Logger = log
		svc, err := outbound.New(ctx, cfg, d.Bus)
		if err != nil {
			return nil, err
		}
		return &runner{run: svc.Run}, nil
	}
}
