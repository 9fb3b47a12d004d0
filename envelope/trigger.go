package envelope

import (
	"errors"
	"fmt"
	"strings"
)

// Trigger names a kind of inbound envelope: Channel, meta.source Event and,
// when set, Action ("*" matches any action). Its text form,
// "{channel}.{event}[.{action}]", is how the agent's triggers and the hooks'
// `on` entries are written.
type Trigger struct {
	Channel Channel
	Event   string
	Action  string
}

// ErrBadTrigger is wrapped by every error of ParseTrigger.
var ErrBadTrigger = errors.New("bad trigger")

// ParseTrigger reads "{channel}.{event}[.{action}]".
func ParseTrigger(s string) (Trigger, error) {
	var t Trigger
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return t, fmt.Errorf("%w %q: want {channel}.{event}[.{action}]", ErrBadTrigger, s)
	}
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, " \t>:") {
			return t, fmt.Errorf("%w %q: empty or malformed part", ErrBadTrigger, s)
		}
	}
	switch ch := Channel(parts[0]); ch {
	case ChannelSlack, ChannelGitHub, ChannelSentry, ChannelOpenProject, ChannelInternal:
		t.Channel = ch
	default:
		return t, fmt.Errorf("%w %q: channel %q is not slack, github, sentry, openproject or internal", ErrBadTrigger, s, parts[0])
	}
	t.Event = parts[1]
	if len(parts) == 3 {
		t.Action = parts[2]
	}
	return t, nil
}

// String is the text form of t.
func (t Trigger) String() string {
	s := string(t.Channel) + "." + t.Event
	if t.Action != "" {
		s += "." + t.Action
	}
	return s
}

// Matches reports whether e is one of t's envelopes.
func (t Trigger) Matches(e *Envelope) bool {
	src := e.Meta.Source
	if src == nil || t.Channel != e.Channel || t.Event != src.Event {
		return false
	}
	return t.Action == "" || t.Action == "*" || t.Action == src.Action
}

// Subject is the inbound subject (relative to the bus prefix) of t's
// envelopes: in.{channel}.{event}. The action is not part of subjects.
func (t Trigger) Subject() string { return Inbound(t.Channel, t.Event) }
