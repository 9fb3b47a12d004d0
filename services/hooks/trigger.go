package hooks

import (
	"slices"

	"github.com/relaystation/relay/envelope"
)

// Trigger is one `on` entry, in the agent's trigger syntax
// "{channel}.{event}[.{action}]" (envelope.Trigger; the agent's ":mention"
// option has no meaning for hooks: use an `if` over content).
type Trigger = envelope.Trigger

// ParseTrigger reads "{channel}.{event}[.{action}]".
func ParseTrigger(s string) (Trigger, error) { return envelope.ParseTrigger(s) }

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
