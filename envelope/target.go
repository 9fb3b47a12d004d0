package envelope

import (
	"encoding/json"
	"fmt"
)

// Target says where an answer is posted: a GitHub issue or pull request, a
// Slack thread, a Sentry issue, an OpenProject work package or a generic
// webhook. It travels in meta.target from the agent's suggestion through the
// approval to the outbound formatter.
type Target struct {
	// Channel is the destination: github, slack, sentry, openproject, or
	// "webhook" for a generic signed webhook.
	Channel string `json:"channel"`

	// GitHub: an issue or pull request comment.
	Owner  string `json:"owner,omitempty"`
	Repo   string `json:"repo,omitempty"`
	Number int    `json:"number,omitempty"`

	// Slack: a message in a channel, in a thread when ThreadTS is set.
	Team     string `json:"team,omitempty"`
	SlackCh  string `json:"slack_channel,omitempty"`
	ThreadTS string `json:"thread_ts,omitempty"`

	// Sentry: a comment on an issue.
	Org     string `json:"org,omitempty"`
	IssueID string `json:"issue_id,omitempty"`

	// OpenProject: a comment on a work package (Host is the instance's host).
	Host          string `json:"host,omitempty"`
	WorkPackageID int    `json:"work_package_id,omitempty"`

	// Webhook: a generic Standard Webhooks endpoint.
	URL string `json:"url,omitempty"`
}

// TargetWebhook is the Target channel of a generic signed webhook.
const TargetWebhook = "webhook"

// NeedsApproval reports whether posting to t acts outside Slack, so a human
// must approve it first.
func (t *Target) NeedsApproval() bool { return t.Channel != string(ChannelSlack) }

// String is a short human form, for approval messages and logs.
func (t *Target) String() string {
	switch t.Channel {
	case string(ChannelGitHub):
		return fmt.Sprintf("GitHub %s/%s#%d", t.Owner, t.Repo, t.Number)
	case string(ChannelSlack):
		return fmt.Sprintf("Slack %s thread %s", t.SlackCh, t.ThreadTS)
	case string(ChannelSentry):
		return fmt.Sprintf("Sentry %s issue %s", t.Org, t.IssueID)
	case string(ChannelOpenProject):
		return fmt.Sprintf("OpenProject %s work package #%d", t.Host, t.WorkPackageID)
	case TargetWebhook:
		return "webhook " + t.URL
	}
	return t.Channel
}

// Validate reports a target missing what its channel needs.
func (t *Target) Validate() error {
	bad := func(what string) error { return fmt.Errorf("target %s: %s is required", t.Channel, what) }
	switch t.Channel {
	case string(ChannelGitHub):
		if t.Owner == "" || t.Repo == "" || t.Number <= 0 {
			return bad("owner, repo and number")
		}
	case string(ChannelSlack):
		if t.SlackCh == "" {
			return bad("slack_channel")
		}
	case string(ChannelSentry):
		if t.IssueID == "" {
			return bad("issue_id")
		}
	case string(ChannelOpenProject):
		if t.WorkPackageID <= 0 {
			return bad("work_package_id")
		}
	case TargetWebhook:
		if t.URL == "" {
			return bad("url")
		}
	default:
		return fmt.Errorf("target channel %q is not github, slack, sentry, openproject or webhook", t.Channel)
	}
	return nil
}

// MetaTarget is the meta key of the target.
const MetaTarget = "target"

// SetTarget stores t in meta.target.
func (m *Meta) SetTarget(t *Target) { m.Encode(MetaTarget, t) }

// Target reads meta.target; it is nil without error when unset.
func (m *Meta) Target() (*Target, error) {
	var t Target
	if ok, err := m.Decode(MetaTarget, &t); !ok || err != nil {
		return nil, err
	}
	return &t, t.Validate()
}

// Encode stores v (a JSON-encodable record) in meta key as its JSON object
// form, the value Decode reads back and a decoded envelope holds.
func (m *Meta) Encode(key string, v any) {
	var obj map[string]any
	b, _ := json.Marshal(v)
	_ = json.Unmarshal(b, &obj)
	m.Set(key, obj)
}

// Decode reads meta key into v (a pointer), reporting whether the key was set.
func (m *Meta) Decode(key string, v any) (bool, error) {
	raw, ok := m.Get(key)
	if !ok || raw == nil {
		return false, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return true, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return true, fmt.Errorf("meta.%s: %w", key, err)
	}
	return true, nil
}
