package secret

import (
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// The process's known secrets: every value config.Env read through its
// secret accessors and every credential inside a URL setting. Redactors
// (the tool runner's, the log handler's) remove them all, so a secret needs
// no hand-written list to be redacted.
var known struct {
	mu   sync.Mutex
	vals map[string]bool
	// keyed are the secrets that change while the process runs (OAuth
	// access and refresh tokens), by what they belong to: a new value
	// replaces the old one, so the set stays as large as the grants.
	keyed map[string][]string
	rep   atomic.Pointer[knownSet]
}

type knownSet struct {
	vals []string // longest first
	rep  *strings.Replacer
}

// minKnownLen keeps short values ("1", "yes") from being treated as secrets.
const minKnownLen = 6

// Remember adds values to the process's known secrets (shorter than 6
// bytes are ignored).
func Remember(values ...string) {
	known.mu.Lock()
	defer known.mu.Unlock()
	if known.vals == nil {
		known.vals = map[string]bool{}
	}
	added := false
	for _, v := range values {
		if len(v) >= minKnownLen && !known.vals[v] {
			known.vals[v], added = true, true
		}
	}
	if added {
		rebuildLocked()
	}
}

// RememberAs makes values the known secrets of key, in place of what key
// had (an OAuth grant's tokens after a refresh); no values forgets key.
func RememberAs(key string, values ...string) {
	known.mu.Lock()
	defer known.mu.Unlock()
	var keep []string
	for _, v := range values {
		if len(v) >= minKnownLen {
			keep = append(keep, v)
		}
	}
	if slices.Equal(known.keyed[key], keep) {
		return
	}
	if known.keyed == nil {
		known.keyed = map[string][]string{}
	}
	if len(keep) == 0 {
		delete(known.keyed, key)
	} else {
		known.keyed[key] = keep
	}
	rebuildLocked()
}

// rebuildLocked makes the replacer of every known secret (known.mu held).
func rebuildLocked() {
	all := map[string]bool{}
	for v := range known.vals {
		all[v] = true
	}
	for _, vs := range known.keyed {
		for _, v := range vs {
			all[v] = true
		}
	}
	if len(all) == 0 {
		known.rep.Store(nil)
		return
	}
	set := &knownSet{}
	for v := range all {
		set.vals = append(set.vals, v)
	}
	sort.Slice(set.vals, func(i, j int) bool { return len(set.vals[i]) > len(set.vals[j]) })
	pairs := make([]string, 0, 2*len(set.vals))
	for _, v := range set.vals {
		pairs = append(pairs, v, "[REDACTED]")
	}
	set.rep = strings.NewReplacer(pairs...)
	known.rep.Store(set)
}

// RememberURL adds the credentials inside a URL setting (the password, a
// user name used as a token, and secret-named query values) to the known
// secrets.
func RememberURL(raw string) {
	u, err := url.Parse(raw)
	if err != nil {
		return
	}
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			Remember(p, url.QueryEscape(p))
		} else {
			// nats://TOKEN@host: the user name is the token.
			Remember(u.User.Username())
		}
	}
	for k, vs := range u.Query() {
		lk := strings.ToLower(k)
		for _, w := range []string{"pass", "token", "secret", "key", "auth"} {
			if strings.Contains(lk, w) {
				Remember(vs...)
				break
			}
		}
	}
}

// Known reports whether the process knows any secret.
func Known() bool { return known.rep.Load() != nil }

// RedactKnown returns s with every known secret replaced by "[REDACTED]",
// and whether anything was.
func RedactKnown(s string) (string, bool) {
	set := known.rep.Load()
	if set == nil {
		return s, false
	}
	for _, v := range set.vals {
		if strings.Contains(s, v) {
			return set.rep.Replace(s), true
		}
	}
	return s, false
}
