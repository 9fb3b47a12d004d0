package hooks

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
)

// Context is what mappings, templates and conditions read: the envelope's
// fields and the provider facts derivable from it (see Variables).
type Context map[string]any

// envelopeVars are always present (possibly empty).
var envelopeVars = []string{"id", "channel", "event", "action", "thread", "task_id", "actor", "url", "delivery_id", "content", "timestamp", "bot"}

// factVars are set when the envelope carries them: from meta.facts when a
// mapper fills it, otherwise derived from meta.thread and the provider's meta
// extra.
var factVars = []string{
	"repository", "owner", "repo", "number", "title", "labels", "state", "branch", "base", "ref", "tag", "sha", // GitHub
	"project", "level", "culprit", "issue_id", "org", "short_id", // Sentry (project, title, status also OpenProject)
	"type", "status", "work_package_id", "host", "priority", "assignee", // OpenProject
	"team", "slack_channel", "user", // Slack
}

// Variables lists every context variable name, sorted.
func Variables() []string {
	v := slices.Concat(envelopeVars, factVars)
	slices.Sort(v)
	return slices.Compact(v)
}

func knownVariable(name string) bool {
	return slices.Contains(envelopeVars, name) || slices.Contains(factVars, name)
}

// NewContext builds the context of an envelope.
func NewContext(e *envelope.Envelope) Context {
	c := make(Context, 24)
	c["id"] = e.ID
	c["channel"] = string(e.Channel)
	c["thread"] = e.Meta.Thread
	c["task_id"] = e.Meta.TaskID
	c["content"] = e.Content
	c["timestamp"] = e.Timestamp.UTC().Format(time.RFC3339)
	c["event"], c["action"], c["actor"], c["url"], c["delivery_id"] = "", "", "", "", ""
	// bot: a bot wrote it (GitHub meta.bot, Slack meta.slack.bot). The
	// relay's Slack posts carry no marker in their text, so `!bot` is how a
	// hook on Slack messages leaves them (and its own replies) alone.
	c["bot"], _ = e.Meta.Extra["bot"].(bool)
	if s := e.Meta.Source; s != nil {
		c["event"], c["action"], c["actor"], c["url"], c["delivery_id"] = s.Event, s.Action, s.Actor, s.URL, s.DeliveryID
	}
	_, rest, _ := strings.Cut(e.Meta.Thread, ":")
	switch e.Channel {
	case envelope.ChannelGitHub:
		path, num, hasNum := strings.Cut(rest, "#")
		if owner, repo, ok := strings.Cut(path, "/"); ok && owner != "" && repo != "" {
			c["repository"], c["owner"], c["repo"] = path, owner, repo
		}
		if n, err := strconv.Atoi(num); hasNum && err == nil {
			c["number"] = n
		}
	case envelope.ChannelSentry:
		if org, id, ok := strings.Cut(rest, "/"); ok {
			c["org"] = org
			if !strings.HasPrefix(id, "incident-") {
				c["issue_id"] = id
			}
		}
		copyStrings(c, e.Meta.Extra["sentry"], "org", "issue_id", "project", "level", "culprit", "title", "status", "short_id")
	case envelope.ChannelOpenProject:
		if host, id, ok := strings.Cut(rest, "/work_packages/"); ok {
			c["host"] = host
			if n, err := strconv.Atoi(id); err == nil {
				c["work_package_id"] = n
			}
		}
		copyStrings(c, e.Meta.Extra["openproject"], "project", "type", "status", "priority", "assignee")
		if m, ok := e.Meta.Extra["openproject"].(map[string]any); ok {
			if v, ok := m["work_package_subject"].(string); ok && v != "" {
				c["title"] = v
			}
		}
	case envelope.ChannelSlack:
		if parts := strings.SplitN(rest, "/", 3); len(parts) == 3 {
			c["team"], c["slack_channel"] = parts[0], parts[1]
		}
		if s, ok := e.Meta.Extra["slack"].(map[string]any); ok {
			if b, _ := s["bot"].(bool); b {
				c["bot"] = true
			}
			if v, ok := s["user"].(string); ok {
				c["user"] = v
			}
			if v, ok := s["channel"].(string); ok {
				c["slack_channel"] = v
			}
		}
	}
	// meta.facts, when a mapper fills it, wins over what was derived. A
	// whole number decoded from JSON (float64) becomes an int, as derived
	// numbers are.
	if f, ok := e.Meta.Extra[mappers.FactsKey].(map[string]any); ok {
		for _, k := range factVars {
			v, ok := f[k]
			if !ok {
				continue
			}
			if n, isNum := v.(float64); isNum && n == float64(int(n)) {
				v = int(n)
			}
			c[k] = v
		}
	}
	return c
}

func copyStrings(c Context, src any, keys ...string) {
	m, ok := src.(map[string]any)
	if !ok {
		return
	}
	for _, k := range keys {
		switch v := m[k].(type) {
		case string:
			if v != "" {
				c[k] = v
			}
		case float64:
			c[k] = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
}
