package tools

import (
	"iter"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/relaystation/relay/secret"
)

// Redacted replaces every secret the Redactor removes.
const Redacted = "[REDACTED]"

// minSecretLen keeps short values ("1", "yes") from being treated as secrets.
const minSecretLen = 6

// tokenRE is the shared set of credential shapes (secret.TokenPattern).
var tokenRE = secret.TokenPattern

// Redactor removes configured secret values and common token shapes from
// text. It is immutable and safe for concurrent use.
type Redactor struct {
	values *strings.Replacer
	any    []string
}

// NewRedactor returns a Redactor for the given secrets (unset and very short
// values are ignored) plus the built-in token shapes.
func NewRedactor(secrets ...secret.Value) *Redactor {
	var vals []string
	seen := map[string]bool{}
	for _, s := range secrets {
		v := s.Reveal()
		if len(v) < minSecretLen || seen[v] {
			continue
		}
		seen[v] = true
		vals = append(vals, v)
	}
	// Longest first, so a secret containing another is removed whole.
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	r := &Redactor{any: vals}
	if len(vals) > 0 {
		pairs := make([]string, 0, 2*len(vals))
		for _, v := range vals {
			pairs = append(pairs, v, Redacted)
		}
		r.values = strings.NewReplacer(pairs...)
	}
	return r
}

// String returns s without secrets and whether anything was removed.
func (r *Redactor) String(s string) (string, bool) {
	// Every secret the process read (config.Env) first, then this
	// redactor's own values.
	s, changed := secret.RedactKnown(s)
	if r != nil && r.values != nil {
		for _, v := range r.any {
			if strings.Contains(s, v) {
				s = r.values.Replace(s)
				changed = true
				break
			}
		}
	}
	if secret.MayHoldToken(s) && tokenRE.MatchString(s) {
		s = tokenRE.ReplaceAllString(s, Redacted)
		changed = true
	}
	if out, n := secret.RedactBearer(s, Redacted); n > 0 {
		s, changed = out, true
	}
	return s, changed
}

// Value redacts every string inside a decoded JSON value (maps and slices
// are rewritten in place) and reports whether anything was removed.
func (r *Redactor) Value(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		return r.String(x)
	case map[string]any:
		return x, redactEach(r, maps.All(x), func(k string, n any) { x[k] = n })
	case []any:
		return x, redactEach(r, slices.All(x), func(i int, n any) { x[i] = n })
	}
	return v, false
}

// redactEach redacts the values of a map's or a slice's entries, storing back
// with set those it changed, and reports whether it changed any.
func redactEach[K any](r *Redactor, entries iter.Seq2[K, any], set func(K, any)) bool {
	changed := false
	for k, e := range entries {
		if n, ok := r.Value(e); ok {
			set(k, n)
			changed = true
		}
	}
	return changed
}

// With returns a Redactor that also removes values (a server's own secrets);
// r is unchanged. Values shorter than 6 bytes are ignored.
func (r *Redactor) With(values ...string) *Redactor {
	if len(values) == 0 {
		return r
	}
	var all []secret.Value
	if r != nil {
		for _, v := range r.any {
			all = append(all, secret.New(v))
		}
	}
	for _, v := range values {
		all = append(all, secret.New(v))
	}
	return NewRedactor(all...)
}
