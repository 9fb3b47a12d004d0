package envelope

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MarshalJSON writes e without reflection for the fixed fields; the free-form
// maps (tool arguments and results, memory data, meta extras) go through
// encoding/json. The output is what encoding/json would write for the same
// value (FuzzMarshalMatchesReflection checks it).
func (e *Envelope) MarshalJSON() ([]byte, error) {
	return e.AppendMarshal(make([]byte, 0, 512+len(e.Content)))
}

// AppendMarshal appends the bytes MarshalJSON returns to b (a producer
// that reuses its buffers allocates none).
func (e *Envelope) AppendMarshal(b []byte) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = appendString(b, e.ID)
	b = append(b, `,"timestamp":`...)
	b, err := appendTime(b, e.Timestamp)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"channel":`...)
	b = appendString(b, string(e.Channel))
	b = append(b, `,"role":`...)
	b = appendString(b, string(e.Role))
	if c := e.Context; c != nil {
		b = append(b, `,"context":{`...)
		b = appendFields(b, "system", c.System, "session", c.Session, "task", c.Task)
		b = append(b, '}')
	}
	b = append(b, `,"content":`...)
	b = appendString(b, e.Content)
	if tc := e.ToolCall; tc != nil {
		b = append(b, `,"tool_call":{`...)
		if tc.ID != "" {
			b = append(b, `"id":`...)
			b = appendString(b, tc.ID)
			b = append(b, ',')
		}
		b = append(b, `"name":`...)
		b = appendString(b, tc.Name)
		if b, err = appendMap(b, "args", tc.Args); err != nil {
			return nil, err
		}
		if b, err = appendMap(b, "result", tc.Result); err != nil {
			return nil, err
		}
		b = append(b, '}')
	}
	if m := e.MemoryUpdate; m != nil {
		b = append(b, `,"memory_update":{"kind":`...)
		b = appendString(b, string(m.Kind))
		b = append(b, `,"data":`...)
		d, err := json.Marshal(m.Data)
		if err != nil {
			return nil, fmt.Errorf("memory_update.data: %w", err)
		}
		b = append(b, d...)
		if m.TTL != 0 {
			b = append(b, `,"ttl":`...)
			b = strconv.AppendInt(b, int64(m.TTL), 10)
		}
		b = append(b, '}')
	}
	if len(e.RetrievalRefs) > 0 {
		b = append(b, `,"retrieval_refs":`...)
		b = appendStrings(b, e.RetrievalRefs)
	}
	b = append(b, `,"meta":`...)
	if b, err = e.Meta.appendJSON(b); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendTime writes t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds, quoted) without its allocation; a time it refuses (a year
// outside 0000-9999, a zone offset of a day or more) goes through it for
// its error.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	_, off := t.Zone()
	if y := t.Year(); y < 0 || y > 9999 || off <= -24*3600 || off >= 24*3600 {
		if _, err := t.MarshalJSON(); err != nil {
			return nil, fmt.Errorf("timestamp: %w", err)
		}
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// appendJSON writes m as Meta.MarshalJSON does: the known fields in struct
// order, or, with Extra, every key sorted as encoding/json sorts a map (a
// known field that is set wins over an Extra key of its name).
func (m *Meta) appendJSON(b []byte) ([]byte, error) {
	if len(m.Extra) == 0 {
		return m.appendKnown(b), nil
	}
	kvs := make([]metaKV, 0, len(m.Extra)+5)
	kvs = m.knownKVs(kvs)
	known := len(kvs)
	for k, v := range m.Extra {
		if slices.ContainsFunc(kvs[:known], func(kv metaKV) bool { return kv.key == k }) {
			continue
		}
		enc, err := appendValue(nil, v)
		if err != nil {
			return nil, fmt.Errorf("meta %s: %w", k, err)
		}
		kvs = append(kvs, metaKV{k, enc})
	}
	slices.SortFunc(kvs, func(x, y metaKV) int { return strings.Compare(x.key, y.key) })
	b = append(b, '{')
	for i, kv := range kvs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, kv.key)
		b = append(b, ':')
		b = append(b, kv.val...)
	}
	return append(b, '}'), nil
}

// metaKV is one encoded key of meta.
type metaKV struct {
	key string
	val []byte
}

// knownKVs appends the known fields that are set, each encoded alone.
func (m *Meta) knownKVs(kvs []metaKV) []metaKV {
	for _, f := range [...]struct{ key, val string }{{"mcp_version", m.MCPVersion}, {"thread", m.Thread}, {"task_id", m.TaskID}} {
		if f.val != "" {
			kvs = append(kvs, metaKV{f.key, appendString(nil, f.val)})
		}
	}
	if m.Source != nil {
		kvs = append(kvs, metaKV{"source", m.Source.appendJSON(nil)})
	}
	if m.Budget != nil {
		kvs = append(kvs, metaKV{"budget", m.Budget.appendJSON(nil)})
	}
	return kvs
}

// appendKnown writes the known fields in struct order (no Extra).
func (m *Meta) appendKnown(b []byte) []byte {
	b = append(b, '{')
	start := len(b)
	b = appendFields(b, "mcp_version", m.MCPVersion, "thread", m.Thread, "task_id", m.TaskID)
	if m.Source != nil {
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, `"source":`...)
		b = m.Source.appendJSON(b)
	}
	if m.Budget != nil {
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, `"budget":`...)
		b = m.Budget.appendJSON(b)
	}
	return append(b, '}')
}

func (s *Source) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = appendFields(b, "event", s.Event, "action", s.Action, "delivery_id", s.DeliveryID, "url", s.URL, "actor", s.Actor)
	return append(b, '}')
}

func (bu *Budget) appendJSON(b []byte) []byte {
	b = append(b, `{"tokens":`...)
	b = strconv.AppendInt(b, int64(bu.Tokens), 10)
	if bu.Limit != 0 {
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, int64(bu.Limit), 10)
	}
	return append(b, '}')
}

// appendFields writes "k":"v" pairs, skipping empty values (omitempty).
func appendFields(b []byte, kv ...string) []byte {
	first := true
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, kv[i]...)
		b = append(b, `":`...)
		b = appendString(b, kv[i+1])
	}
	return b
}

func appendMap(b []byte, key string, m map[string]any) ([]byte, error) {
	if len(m) == 0 {
		return b, nil
	}
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	b, err := appendValue(b, m)
	if err != nil {
		return nil, fmt.Errorf("tool_call.%s: %w", key, err)
	}
	return b, nil
}

// appendValue writes v as encoding/json does. The shapes mappers and tools
// build (strings, bools, ints, lists, objects with sorted keys, null) are
// written directly; anything else, floats included, goes through
// encoding/json.
func appendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendString(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case []any:
		return appendList(b, x)
	case map[string]any:
		return appendObject(b, x)
	}
	enc, err := json.Marshal(v)
	return append(b, enc...), err
}

func appendList(b []byte, l []any) ([]byte, error) {
	if l == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i, v := range l {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendValue(b, v); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// appendObject writes m with its keys sorted, as encoding/json writes a map.
func appendObject(b []byte, m map[string]any) ([]byte, error) {
	if m == nil {
		return append(b, "null"...), nil
	}
	// The keys of a small object are sorted in an array on the stack.
	var small [16]string
	keys := small[:0]
	if len(m) > len(small) {
		keys = make([]string, 0, len(m))
	}
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		var err error
		if b, err = appendValue(b, m[k]); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

const hexDigits = "0123456789abcdef"

// plain marks the ASCII bytes a JSON string holds as they are: not a control
// character, quote or backslash, nor one encoding/json escapes for HTML.
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendStrings writes ss as a JSON array of strings ([] when empty).
func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendString writes s as a JSON string exactly as encoding/json does
// (HTML-safe escapes, invalid UTF-8 as U+FFFD, U+2028/2029 escaped).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
