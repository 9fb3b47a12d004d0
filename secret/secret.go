// Package secret holds secret values (tokens, signing secrets, passwords) so
// they cannot leak through logs or fmt: they print and log as REDACTED.
package secret

import "log/slog"

// Value is a secret string. Use Reveal to read it; String, Format verbs and
// slog all print REDACTED. The zero Value is empty.
type Value struct{ v string }

// New wraps s.
func New(s string) Value { return Value{v: s} }

// Reveal returns the secret itself. Call it only where the value is used
// (signing, an Authorization header), never to log it.
func (s Value) Reveal() string { return s.v }

// IsSet reports whether the secret is non-empty.
func (s Value) IsSet() bool { return s.v != "" }

// String returns REDACTED (or "" for an unset secret).
func (s Value) String() string {
	if s.v == "" {
		return ""
	}
	return "REDACTED"
}

// GoString keeps %#v from printing the value.
func (s Value) GoString() string { return "secret.Value(" + s.String() + ")" }

// LogValue makes slog print REDACTED.
func (s Value) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText keeps encoders from writing the value.
func (s Value) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
