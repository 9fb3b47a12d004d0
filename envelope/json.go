package envelope

import "time"

// AppendJSON appends v as encoding/json.Marshal writes it: the same bytes
// (object keys sorted, HTML-safe string escapes), without reflection for the
// shapes decoded JSON and tool arguments take (strings, bools, ints, lists,
// objects, null); anything else goes through encoding/json. Other packages
// hash and log with it (tools' audit lines).
func AppendJSON(b []byte, v any) ([]byte, error) { return appendValue(b, v) }

// AppendString appends s as a JSON string, exactly as encoding/json writes it.
func AppendString(b []byte, s string) []byte { return appendString(b, s) }

// AppendStrings appends ss as a JSON array of strings, each as AppendString
// writes it; an empty or nil ss is [].
func AppendStrings(b []byte, ss []string) []byte { return appendStrings(b, ss) }

// AppendTime appends t as time.Time.MarshalJSON writes it (RFC 3339 with
// nanoseconds, quoted), or returns MarshalJSON's error.
func AppendTime(b []byte, t time.Time) ([]byte, error) { return appendTime(b, t) }
