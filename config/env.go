// Package config reads the relay's settings from environment variables (and
// files they name) and validates them, naming the variable in every error.
//
// Only the command layer reads the environment: cmd/relay builds an Env over
// os.Getenv, internal/cli hands it to each service's ReadSettings
// (services/<name>/settings.go), which maps variables into the service's
// Config, and stops startup on Env.Err. Secrets come from NAME or from the file
// named by NAME_FILE, never from flags.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaystation/relay/secret"
)

// Env reads variables and collects every problem, so one startup reports all
// of them. It is not safe for concurrent use.
type Env struct {
	get  func(string) string
	list func() []string
	errs []error
	used map[string]bool
}

// NewEnv reads variables through get; environ lists "NAME=value" pairs for
// the unknown-variable check (os.Environ in production).
func NewEnv(get func(string) string, environ func() []string) *Env {
	return &Env{get: get, list: environ, used: map[string]bool{}}
}

// OS is an Env over the process environment.
func OS() *Env { return NewEnv(os.Getenv, os.Environ) }

// FromMap is an Env over a map, for tests.
func FromMap(m map[string]string) *Env {
	return NewEnv(func(k string) string { return m[k] }, func() []string {
		out := make([]string, 0, len(m))
		for k, v := range m {
			out = append(out, k+"="+v)
		}
		return out
	})
}

func (e *Env) lookup(name string) string {
	e.used[name] = true
	return strings.TrimSpace(e.get(name))
}

// Failf records a problem with a variable. A problem already recorded (two
// services of one process read the same setting) is recorded once.
func (e *Env) Failf(name, format string, args ...any) {
	err := fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	for _, prev := range e.errs {
		if prev.Error() == err.Error() {
			return
		}
	}
	e.errs = append(e.errs, err)
}

// String returns the variable or def when unset.
func (e *Env) String(name, def string) string {
	if v := e.lookup(name); v != "" {
		return v
	}
	return def
}

// OneOf returns the variable, which must be one of allowed, or def.
func (e *Env) OneOf(name, def string, allowed ...string) string {
	v := strings.ToLower(e.String(name, def))
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	e.Failf(name, "%q is not one of %s", v, strings.Join(allowed, ", "))
	return def
}

// Secret returns the secret in NAME, or the contents of the file named by
// NAME_FILE (trailing newline trimmed). Setting both is an error.
func (e *Env) Secret(name string) secret.Value {
	secretSettings.Store(name, true)
	v := e.get(name)
	e.used[name] = true
	file := e.lookup(name + "_FILE")
	switch {
	case v != "" && file != "":
		e.Failf(name, "set either %s or %s_FILE, not both", name, name)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			e.Failf(name+"_FILE", "read secret file: %v", err)
			return secret.Value{}
		}
		v := strings.TrimRight(string(b), "\r\n")
		secret.Remember(v) // redacted everywhere from now on
		return secret.New(v)
	}
	secret.Remember(v)
	return secret.New(v)
}

// secretSettings is the registry of the secret settings the binary knows:
// every name read through Secret.
var secretSettings sync.Map

// SecretSettings lists, sorted, every setting read through Secret so far in
// this process (read every service's settings first: the binary's registry).
func SecretSettings() []string {
	var out []string
	secretSettings.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	sort.Strings(out)
	return out
}

// Int returns the variable as an integer in [lo, hi], or def when unset.
func (e *Env) Int(name string, def, lo, hi int) int {
	return inRange(e, name, def, lo, hi, strconv.Atoi, "a whole number", "")
}

// Duration returns the variable as a Go duration ("30s", "5m") in [lo, hi], or def.
func (e *Env) Duration(name string, def, lo, hi time.Duration) time.Duration {
	return inRange(e, name, def, lo, hi, time.ParseDuration, "a duration", " (like 30s or 5m)")
}

// inRange returns the variable parsed by parse, which must give a value in
// [lo, hi], or def when unset; what names the kind of value in the error,
// and hint follows it.
func inRange[T cmp.Ordered](e *Env, name string, def, lo, hi T, parse func(string) (T, error), what, hint string) T {
	v := e.lookup(name)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil || x < lo || x > hi {
		e.Failf(name, "%q is not %s from %v to %v%s", v, what, lo, hi, hint)
		return def
	}
	return x
}

// Bool returns the variable as a boolean (true/false/1/0/yes/no), or def.
func (e *Env) Bool(name string, def bool) bool {
	v := strings.ToLower(e.lookup(name))
	switch v {
	case "":
		return def
	case "1", "true", "yes", "on":
		return true
	case "0", "false", "no", "off":
		return false
	}
	e.Failf(name, "%q is not true or false", v)
	return def
}

// URL returns the variable, which must be an absolute URL with one of the
// schemes, or "" when unset. Credentials in it are never echoed in errors.
func (e *Env) URL(name string, schemes ...string) string {
	v := e.lookup(name)
	if v == "" {
		return ""
	}
	secret.RememberURL(v) // its credentials are redacted everywhere from now on
	u, err := url.Parse(v)
	if err != nil || u.Host == "" && u.Scheme != "unix" {
		e.Failf(name, "not an absolute URL")
		return ""
	}
	if len(schemes) > 0 {
		ok := false
		for _, s := range schemes {
			ok = ok || u.Scheme == s
		}
		if !ok {
			e.Failf(name, "scheme %q is not one of %s", u.Scheme, strings.Join(schemes, ", "))
			return ""
		}
	}
	return v
}

// Addr returns the variable as a listen address "host:port" (host may be
// empty), or def.
func (e *Env) Addr(name, def string) string {
	v := e.String(name, def)
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		e.Failf(name, "%q is not host:port", v)
		return def
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		e.Failf(name, "port %q is not a number from 0 to 65535", port)
		return def
	}
	return v
}

// List returns the variable split on commas, trimmed, empty parts dropped.
func (e *Env) List(name string) []string {
	var out []string
	for _, p := range strings.Split(e.lookup(name), ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Unknown records an error for every set variable with one of the prefixes
// that nothing has read: a typo like RELAY_HTTP_ADR stops startup instead of
// being ignored. Call it after every setting was read.
func (e *Env) Unknown(prefixes ...string) {
	var unknown []string
	for _, kv := range e.list() {
		name, _, _ := strings.Cut(kv, "=")
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) && !e.used[name] {
				unknown = append(unknown, name)
			}
		}
	}
	sort.Strings(unknown)
	for _, n := range unknown {
		e.Failf(n, "unknown setting (not used by any relay service)")
	}
}

// Scratch returns an Env over the same variables whose reads and problems do
// not count: read another component's settings into it, then pass it to Known,
// so the unknown-variable check knows every setting of the binary.
func (e *Env) Scratch() *Env { return NewEnv(e.get, e.list) }

// Known marks every variable other read as known to e.
func (e *Env) Known(other *Env) {
	for k := range other.used {
		e.used[k] = true
	}
}

// Err returns every recorded problem, joined, or nil.
func (e *Env) Err() error { return errors.Join(e.errs...) }
