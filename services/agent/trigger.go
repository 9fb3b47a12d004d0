package agent

import (
	"errors"
	"fmt"
	"strings"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
)

// DefaultTriggers are the events that start a task unless RELAY_AGENT_TRIGGERS
// says otherwise: Slack app mentions and slash commands, GitHub issues opened
// and issue or pull-request comments that mention the bot, Sentry issues
// created and OpenProject work packages created.
var DefaultTriggers = []string{
	"slack.app_mention",
	"slack.command",
	"github.issues.opened",
	"github.issue_comment.created:mention",
	"github.pull_request_review_comment.created:mention",
	"github.discussion_comment.created:mention",
	"sentry.issue.created",
	"openproject.work_package.created",
}

// OutboundMarker starts the hidden marker the relay writes into what it posts
// (`<!-- relay:{task id} -->`); a message containing it is the relay's own.
const OutboundMarker = mappers.MarkerPrefix

// Trigger is one rule that starts a task: an inbound envelope of the
// trigger's kind (envelope.Trigger). With Mention the envelope's content
// must also mention the bot.
//
// Its text form is "{channel}.{event}[.{action}][:mention]", for example
// "github.issues.opened" or "github.issue_comment.created:mention".
type Trigger struct {
	envelope.Trigger
	Mention bool
}

// String is the text form of t.
func (t Trigger) String() string {
	s := t.Trigger.String()
	if t.Mention {
		s += ":mention"
	}
	return s
}

// ErrBadTrigger is wrapped by every error of ParseTrigger.
var ErrBadTrigger = envelope.ErrBadTrigger

// ParseTrigger reads the text form of a trigger.
func ParseTrigger(s string) (Trigger, error) {
	var t Trigger
	spec := strings.TrimSpace(s)
	if base, opt, ok := strings.Cut(spec, ":"); ok {
		if opt != "mention" {
			return t, fmt.Errorf("%w %q: unknown option %q (want :mention)", ErrBadTrigger, s, opt)
		}
		t.Mention, spec = true, base
	}
	et, err := envelope.ParseTrigger(spec)
	t.Trigger = et
	return t, err
}

// ParseTriggers reads a list of triggers; an empty list means DefaultTriggers.
func ParseTriggers(specs []string) ([]Trigger, error) {
	if len(specs) == 0 {
		specs = DefaultTriggers
	}
	out := make([]Trigger, 0, len(specs))
	var errs []error
	for _, s := range specs {
		t, err := ParseTrigger(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}

// Matcher decides which inbound envelopes start a task.
type Matcher struct {
	// Triggers are the rules; an envelope matching one of them starts a task.
	Triggers []Trigger
	// Mention is how users address the bot ("@relay-bot"); triggers with
	// Mention never fire when it is empty.
	Mention string
	// BotUsers are the relay's own accounts (GitHub logins, Slack user ids);
	// their messages never start a task. Compared case-insensitively, a
	// GitHub App's "name[bot]" form included.
	BotUsers []string
}

// Skip reasons reported by Match.
const (
	SkipNotUser      = "not a user message"
	SkipSelf         = "authored by the relay"
	SkipBot          = "authored by a bot"
	SkipEdit         = "an edit"
	SkipNoTrigger    = "no trigger matches"
	SkipNoMention    = "does not mention the bot"
	SkipNoSource     = "no meta.source"
	SkipMissingEvent = "no event"
)

// Match reports whether e starts a task; when it does not, why (one of the
// Skip constants).
func (m *Matcher) Match(e *envelope.Envelope) (bool, string) {
	if e.Role != envelope.RoleUser {
		return false, SkipNotUser
	}
	if reason := m.selfAuthored(e); reason != "" {
		return false, reason
	}
	src := e.Meta.Source
	if src == nil {
		return false, SkipNoSource
	}
	if src.Event == "" {
		return false, SkipMissingEvent
	}
	reason := SkipNoTrigger
	for _, t := range m.Triggers {
		if !t.Matches(e) {
			continue
		}
		if t.Mention && !m.mentions(e.Content) {
			reason = SkipNoMention
			continue
		}
		return true, ""
	}
	return false, reason
}

func (m *Matcher) mentions(content string) bool {
	if m.Mention == "" {
		return false
	}
	return strings.Contains(strings.ToLower(content), strings.ToLower(m.Mention))
}

// selfAuthored reports why e was written by the relay (or another bot), or "".
func (m *Matcher) selfAuthored(e *envelope.Envelope) string {
	if strings.Contains(e.Content, OutboundMarker) {
		return SkipSelf
	}
	if e.Meta.Source != nil && m.isBotUser(e.Meta.Source.Actor) {
		return SkipSelf
	}
	// GitHub: the mapper marks senders of type Bot with meta.bot.
	if b, _ := e.Meta.Extra["bot"].(bool); b {
		return SkipBot
	}
	// Slack: the mapper marks bot messages and edits in meta.slack.
	if s, ok := e.Meta.Extra["slack"].(map[string]any); ok {
		if self, _ := s["self"].(bool); self {
			return SkipSelf // posted by the relay's own app
		}
		if b, _ := s["bot"].(bool); b {
			return SkipBot
		}
		if ed, _ := s["edit"].(bool); ed {
			return SkipEdit
		}
		if u, _ := s["user"].(string); m.isBotUser(u) {
			return SkipSelf
		}
	}
	return ""
}

func (m *Matcher) isBotUser(actor string) bool {
	if actor == "" {
		return false
	}
	a := strings.TrimSuffix(strings.ToLower(actor), "[bot]")
	for _, u := range m.BotUsers {
		if u = strings.TrimSuffix(strings.ToLower(strings.TrimPrefix(u, "@")), "[bot]"); u != "" && u == a {
			return true
		}
	}
	return false
}
