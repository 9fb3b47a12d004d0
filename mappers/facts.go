package mappers

import (
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
)

// FactsKey is the meta key under which a mapper puts the provider facts a
// consumer (hooks, the agent, a policy) may want without parsing the content:
// meta.facts is an object of strings, whole numbers and lists of strings
// (labels). The keys per provider are listed in docs/hooks.md.
const FactsKey = "facts"

// Facts collects provider facts; the zero value is ready to use. Empty values
// are left out, so an envelope carries only the facts its webhook had.
type Facts map[string]any

// Str sets a string fact when v is not empty, bounded to MaxContent bytes.
func (f *Facts) Str(k, v string) {
	if v == "" {
		return
	}
	f.set(k, clip.To(v, MaxContent))
}

// Int sets a whole-number fact when v is positive.
func (f *Facts) Int(k string, v int) {
	if v > 0 {
		f.set(k, v)
	}
}

// List sets a list fact when v has at least one non-empty element.
func (f *Facts) List(k string, v []string) {
	out := make([]any, 0, len(v))
	for _, s := range v {
		if s != "" {
			out = append(out, clip.To(s, MaxContent))
		}
	}
	if len(out) > 0 {
		f.set(k, out)
	}
}

func (f *Facts) set(k string, v any) {
	if *f == nil {
		*f = Facts{}
	}
	(*f)[k] = v
}

// SetOn stores the facts as meta.facts of e when there are any.
func (f Facts) SetOn(e *envelope.Envelope) {
	if len(f) > 0 {
		e.Meta.Set(FactsKey, map[string]any(f))
	}
}
