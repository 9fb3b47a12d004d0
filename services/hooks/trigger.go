package hooks

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/relaystation/relay/envelope"
)

// Trigger is one `on` entry: inbound envelopes of Channel whose meta.source
// has Event and, when set, Action ("*" matches any action). Its text form is
// the agent's trigger syntax, "{channel}.{event}[.{action}]" (the agent's
// ":mention" option has no meaning for hooks; use an `if` over content).
type Trigger struct {
	Channel envelope.Channel
	Event   string
	Action  string
}

func (t Trigger) String() string {
	s := string(t.Channel) + "." + t.Event
	if t.Action != "" {
		s += "." + t.Action
	}
	return s
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
	switch ch := envelope.Channel(parts[0]); ch {
	case envelope.ChannelSlack, envelope.ChannelGitHub, envelope.ChannelSentry, envelope.ChannelOpenProject, envelope.ChannelInternal:
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

// Matches reports whether e is one of t's envelopes.
func (t Trigger) Matches(e *envelope.Envelope) bool {
	src := e.Meta.Source
	if src == nil || t.Channel != e.Channel || t.Event != src.Event {
		return false
	}
	return t.Action == "" || t.Action == "*" || t.Action == src.Action
}

// Subject is the inbound subject (relative to the bus prefix) of t's
// envelopes: in.{channel}.{event}. The action is not part of subjects.
func (t Trigger) Subject() string { return envelope.Inbound(t.Channel, t.Event) }

// Subjects are the inbound subjects f's hooks need, sorted and unique: the
// hooks consumer's filter. Nil when f has no hooks.
func (f *File) Subjects() []string {
	var out []string
	for _, h := range f.Hooks {
		if h == nil {
			continue
		}
		for _, t := range h.triggers {
			out = append(out, t.Subject())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
