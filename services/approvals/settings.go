package approvals

import (
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Settings are the approvals worker's settings from the environment.
type Settings struct {
	// Config is the worker's configuration, without Logger.
	Config Config
	// AppToken, when set, runs Socket Mode (interactivity without a public URL).
	AppToken secret.Value
	// Enabled is true when a bot token and an approval channel are set;
	// without them suggestions wait in the stream.
	Enabled bool
}

// ReadSettings reads SLACK_BOT_TOKEN, SLACK_API_URL, SLACK_APPROVAL_CHANNEL,
// RELAY_APPROVAL_CHANNEL_{GITHUB,SENTRY,OPENPROJECT,WEBHOOK}, SLACK_APPROVERS,
// RELAY_APPROVAL_TTL, RELAY_APPROVAL_SWEEP, RELAY_APPROVAL_GROUP_CACHE,
// RELAY_APPROVAL_RETENTION, RELAY_APPROVAL_CONCURRENCY and SLACK_APP_TOKEN.
// Problems are recorded in env.
func ReadSettings(env *config.Env) Settings {
	cfg := Config{
		BotToken:      env.Secret("SLACK_BOT_TOKEN"),
		APIURL:        env.URL("SLACK_API_URL", "http", "https"),
		Channel:       env.String("SLACK_APPROVAL_CHANNEL", ""),
		Channels:      map[string]string{},
		Approvers:     env.List("SLACK_APPROVERS"),
		Policy:        mcpconfig.ReadPolicySetting(env),
		TTL:           env.Duration("RELAY_APPROVAL_TTL", 24*time.Hour, time.Second, 90*24*time.Hour),
		SweepInterval: env.Duration("RELAY_APPROVAL_SWEEP", time.Minute, time.Second, time.Hour),
		GroupCacheTTL: env.Duration("RELAY_APPROVAL_GROUP_CACHE", 5*time.Minute, time.Second, 24*time.Hour),
		Retention:     env.Duration("RELAY_APPROVAL_RETENTION", 30*24*time.Hour, time.Hour, 365*24*time.Hour),
		Concurrency:   env.Int("RELAY_APPROVAL_CONCURRENCY", 8, 1, 256),
	}
	if cfg.Channel != "" && !ValidChannelID(cfg.Channel) {
		env.Failf("SLACK_APPROVAL_CHANNEL", "%q is not a Slack channel id (C…, G…, D…)", cfg.Channel)
	}
	for _, t := range TargetChannels {
		name := "RELAY_APPROVAL_CHANNEL_" + strings.ToUpper(t)
		if ch := env.String(name, ""); ch != "" {
			if !ValidChannelID(ch) {
				env.Failf(name, "%q is not a Slack channel id (C…, G…, D…)", ch)
			}
			cfg.Channels[t] = ch
		}
	}
	for _, a := range cfg.Approvers {
		if !ValidApprover(a) {
			env.Failf("SLACK_APPROVERS", "%q is not a Slack user id (U…, W…) or user-group id (S…)", a)
		}
	}
	appToken := env.Secret("SLACK_APP_TOKEN")
	if appToken.IsSet() && !strings.HasPrefix(appToken.Reveal(), "xapp-") {
		env.Failf("SLACK_APP_TOKEN", "not an app-level token (want xapp-…)")
	}
	if cfg.TTL > cfg.Retention {
		env.Failf("RELAY_APPROVAL_RETENTION", "%s is shorter than RELAY_APPROVAL_TTL %s", cfg.Retention, cfg.TTL)
	}
	return Settings{Config: cfg, AppToken: appToken, Enabled: cfg.BotToken.IsSet() && cfg.Channel != ""}
}
