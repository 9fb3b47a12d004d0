package approvals

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Config configures the approvals worker.
type Config struct {
	// BotToken is the Slack bot token (SLACK_BOT_TOKEN) used for chat.postMessage,
	// chat.update, chat.postEphemeral, views.open and usergroups.users.list.
	// Without it and Channel the worker runs for the operator console only
	// (ConsoleOnly): suggestions wait as pending records, decided through
	// rpc.approvals.decide.
	BotToken secret.Value
	// APIURL is the Slack Web API base (SLACK_API_URL), ending in "/". Default
	// "https://slack.com/api/".
	APIURL string
	// Channel is the Slack channel id approval threads are posted in
	// (SLACK_APPROVAL_CHANNEL). Required with BotToken.
	Channel string
	// Channels overrides Channel per target channel ("github", "sentry",
	// "openproject", "webhook"), from RELAY_APPROVAL_CHANNEL_{GITHUB,...}.
	Channels map[string]string
	// Approvers are the Slack user ids (U…, W…) and user-group ids (S…) allowed
	// to decide (SLACK_APPROVERS). Empty means nobody may: every click is
	// refused (fail closed).
	Approvers []string
	// TTL is how long a suggestion waits for a decision before it expires
	// (RELAY_APPROVAL_TTL). Default 24h.
	TTL time.Duration
	// SweepInterval is how often expired suggestions are marked
	// (RELAY_APPROVAL_SWEEP). Default 1m.
	SweepInterval time.Duration
	// GroupCacheTTL is how long user-group membership is cached. Default 5m.
	GroupCacheTTL time.Duration
	// Retention is how long records are kept after their last change (the
	// bucket's max age); a click on a message older than that is refused.
	// Default 30 days; at least TTL.
	Retention time.Duration
	// Concurrency is how many messages each consumer handles at once. Default 8.
	Concurrency int
	// Consumer is the durable consumer of agent.suggestion; the interaction
	// consumers are Consumer+"-actions" and Consumer+"-views". Default "approvals".
	Consumer string
	// RefURL returns the URL of a cited reference [[ref:id]] (RELAY_REF_BASE_URL,
	// as outbound links it), or ""; nil shows citations as "[ref:id]".
	RefURL func(id string) string
	// Stop flips the tool runner's stop switch for `/relay stop` and `/relay
	// resume` from approvers; nil answers that it cannot be changed here.
	Stop StopSwitch
	// Policy is the tool runner's policy (RELAY_POLICY): besides the run's
	// author and approvers, a Slack user whose role grants the running tool
	// may cancel a code-block run. nil grants nobody through a role.
	Policy *mcpconfig.Policy
	// Connect makes the links of `/relay connect <server>` (per-person
	// connections of remote MCP servers); nil answers that connecting is
	// not set up here.
	Connect ConnectLinker
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
}

// DefaultAPIURL is Slack's Web API base.
const DefaultAPIURL = "https://slack.com/api/"

func (c *Config) setDefaults() {
	c.APIURL = cmp.Or(c.APIURL, DefaultAPIURL)
	if !strings.HasSuffix(c.APIURL, "/") {
		c.APIURL += "/"
	}
	c.TTL = cmp.Or(c.TTL, 24*time.Hour)
	c.SweepInterval = cmp.Or(c.SweepInterval, time.Minute)
	c.GroupCacheTTL = cmp.Or(c.GroupCacheTTL, 5*time.Minute)
	c.Retention = cmp.Or(c.Retention, 30*24*time.Hour)
	if c.Retention < c.TTL {
		c.Retention = c.TTL
	}
	c.Concurrency = config.Positive(c.Concurrency, 8)
	c.Consumer = cmp.Or(c.Consumer, "approvals")
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

var (
	approverRE = regexp.MustCompile(`^[UWS][A-Z0-9]{2,}$`)
	channelRE  = regexp.MustCompile(`^[CGD][A-Z0-9]{2,}$`)
)

// TargetChannels are the target channels whose approval channel may be overridden.
var TargetChannels = []string{"github", "sentry", "openproject", "webhook"}

// Validate reports a configuration the worker cannot run with.
func (c *Config) Validate() error {
	var errs []error
	if c.ConsoleOnly() {
		return c.validateTimes()
	}
	if !c.BotToken.IsSet() {
		errs = append(errs, errors.New("approvals: a Slack bot token is required with an approval channel"))
	}
	if !channelRE.MatchString(c.Channel) {
		errs = append(errs, fmt.Errorf("approvals: approval channel %q is not a Slack channel id (C…, G…, D…)", c.Channel))
	}
	for k, v := range c.Channels {
		if !channelRE.MatchString(v) {
			errs = append(errs, fmt.Errorf("approvals: approval channel for %s %q is not a Slack channel id", k, v))
		}
	}
	for _, a := range c.Approvers {
		if !approverRE.MatchString(a) {
			errs = append(errs, fmt.Errorf("approvals: approver %q is not a Slack user id (U…, W…) or user-group id (S…)", a))
		}
	}
	return errors.Join(append(errs, c.validateTimes())...)
}

func (c *Config) validateTimes() error {
	var errs []error
	if c.TTL < time.Second {
		errs = append(errs, fmt.Errorf("approvals: TTL %s must be at least 1s", c.TTL))
	}
	if c.SweepInterval < time.Second {
		errs = append(errs, fmt.Errorf("approvals: sweep interval %s must be at least 1s", c.SweepInterval))
	}
	return errors.Join(errs...)
}

// ConsoleOnly reports a configuration without Slack (no bot token, no
// approval channel): suggestions wait for a decision in the operator console.
func (c *Config) ConsoleOnly() bool { return !c.BotToken.IsSet() && c.Channel == "" }

// channelFor is the approval channel for a target channel.
func (c *Config) channelFor(target string) string {
	if ch := c.Channels[target]; ch != "" {
		return ch
	}
	return c.Channel
}

// ValidChannelID reports whether s looks like a Slack channel id (C…, G…, D…).
func ValidChannelID(s string) bool { return channelRE.MatchString(s) }

// ValidApprover reports whether s looks like a Slack user id (U…, W…) or
// user-group id (S…).
func ValidApprover(s string) bool { return approverRE.MatchString(s) }
