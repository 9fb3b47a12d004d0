package outbound

import (
	"log/slog"
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/mappers/webhook"
	"github.com/relaystation/relay/secret"
)

// Settings are the outbound worker's settings from the environment: the
// destinations' credentials (a destination without them is unconfigured:
// its messages are dead-lettered naming the variable to set).
type Settings struct {
	SlackToken, GitHubToken, SentryToken, OpenProjectToken secret.Value
	SlackURL, GitHubURL, SentryURL, OpenProjectURL         string
	WebhookSecret                                          webhook.Secret
	// Config holds RefURL and Concurrency.
	Config Config
}

// ReadSettings reads SLACK_BOT_TOKEN, SLACK_API_URL, GITHUB_TOKEN,
// GITHUB_API_URL, SENTRY_TOKEN, SENTRY_API_URL, OPENPROJECT_URL,
// OPENPROJECT_TOKEN, RELAY_WEBHOOK_SECRET, RELAY_REF_BASE_URL and
// RELAY_OUTBOUND_CONCURRENCY. Problems are recorded in env.
func ReadSettings(env *config.Env) Settings {
	s := Settings{
		SlackToken:       env.Secret("SLACK_BOT_TOKEN"),
		SlackURL:         env.URL("SLACK_API_URL", "http", "https"),
		GitHubToken:      env.Secret("GITHUB_TOKEN"),
		GitHubURL:        env.URL("GITHUB_API_URL", "http", "https"),
		SentryToken:      env.Secret("SENTRY_TOKEN"),
		SentryURL:        env.URL("SENTRY_API_URL", "http", "https"),
		OpenProjectURL:   env.URL("OPENPROJECT_URL", "http", "https"),
		OpenProjectToken: env.Secret("OPENPROJECT_TOKEN"),
	}
	if raw := env.Secret("RELAY_WEBHOOK_SECRET"); raw.IsSet() {
		ws, err := webhook.ParseSecret(raw.Reveal())
		if err != nil {
			env.Failf("RELAY_WEBHOOK_SECRET", "%v", err)
		}
		s.WebhookSecret = ws
		// config.Env remembered "whsec_…"; the key is also written
		// without the prefix (receivers' code and configuration do).
		secret.Remember(strings.TrimPrefix(strings.TrimSpace(raw.Reveal()), webhook.SecretPrefix))
	}
	s.Config = Config{
		RefURL:      RefBaseURL(env.URL("RELAY_REF_BASE_URL", "http", "https")),
		Concurrency: env.Int("RELAY_OUTBOUND_CONCURRENCY", 4, 1, 256),
	}
	return s
}

// Build returns the worker's Config with a client for every configured
// destination and, for the others, what to set (Config.Missing). Logger and
// Registerer are left to the caller.
func (s Settings) Build(log *slog.Logger) (Config, error) {
	cfg := s.Config
	cfg.Missing = map[string]string{}
	missing := func(dest string, vars ...string) {
		cfg.Missing[dest] = strings.Join(vars, " and ") + map[bool]string{true: " is not set", false: " are not set"}[len(vars) == 1]
	}
	var err error
	// Every provider call is an HTTP client span when tracing is on.
	client := telemetry.HTTPClient(30 * time.Second)
	if s.SlackToken.IsSet() {
		if cfg.Slack, err = slack.NewPoster(slack.PosterConfig{HTTPClient: client, Token: s.SlackToken, APIURL: s.SlackURL, RefLink: cfg.RefURL, Logger: log}); err != nil {
			return cfg, err
		}
	} else {
		missing(DestSlack, "SLACK_BOT_TOKEN")
	}
	if s.GitHubToken.IsSet() {
		if cfg.GitHub, err = github.NewCommenter(github.CommenterConfig{HTTPClient: client, Token: s.GitHubToken, APIURL: s.GitHubURL, Logger: log}); err != nil {
			return cfg, err
		}
	} else {
		missing(DestGitHub, "GITHUB_TOKEN")
	}
	if s.SentryToken.IsSet() {
		if cfg.Sentry, err = sentry.NewCommenter(sentry.CommenterConfig{HTTPClient: client, Token: s.SentryToken, APIURL: s.SentryURL, Logger: log}); err != nil {
			return cfg, err
		}
	} else {
		missing(DestSentry, "SENTRY_TOKEN")
	}
	switch opURL, opToken := s.OpenProjectURL, s.OpenProjectToken; {
	case opURL != "" && opToken.IsSet():
		if cfg.OpenProject, err = openproject.NewCommenter(openproject.CommenterConfig{HTTPClient: client, BaseURL: opURL, Token: opToken, Logger: log}); err != nil {
			return cfg, err
		}
	case opURL == "" && !opToken.IsSet():
		missing(DestOpenProject, "OPENPROJECT_URL", "OPENPROJECT_TOKEN")
	case opURL == "":
		missing(DestOpenProject, "OPENPROJECT_URL")
	default:
		missing(DestOpenProject, "OPENPROJECT_TOKEN")
	}
	if s.WebhookSecret.IsSet() {
		if cfg.Webhook, err = webhook.NewSender(webhook.SenderConfig{Client: telemetry.HTTPClient(15 * time.Second), Secret: s.WebhookSecret}); err != nil {
			return cfg, err
		}
	} else {
		missing(DestWebhook, "RELAY_WEBHOOK_SECRET")
	}
	return cfg, nil
}
