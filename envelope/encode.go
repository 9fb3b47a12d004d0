package envelope

import (
	"encoding/json"
	"fmt"

	"unicode/utf8"
)

// MarshalJSON writes e without reflection for the fixed fields; the free-form
// maps (tool arguments and results, memory data, meta extras) go through
// encoding/json. The output is what encoding/json would write for the same
// value (FuzzMarshalMatchesReflection checks it).
func (e *Envelope) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 256+len(e.Content))
	b = append(b, `{"id":`...)
	b = appendString(b, e.ID)
	b = append(b, `,"timestamp":`...)
	ts, err := e.Timestamp.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("timestamp: %w", err)
	}
	b = append(b, ts...)
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
			b = fmt.Appendf(b, "%d", m.TTL)
		}
		b = append(b, '}')
	}
	if len(e.RetrievalRefs) > 0 {
		b = append(b, `,"retrieval_refs":[`...)
		for i, r := range e.RetrievalRefs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, r)
		}
		b = append(b, ']')
	}
	b = append(b, `,"meta":`...)
	if b, err = e.Meta.appendJSON(b); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

func (m *Meta) appendJSON(b []byte) ([]byte, error) {
	if len(m.Extra) > 0 {
		out, err := m.MarshalJSON()
		return append(b, out...), err
	}
	b = append(b, '{')
	start := len(b)
	b = appendFields(b, "mcp_version", m.MCPVersion, "thread", m.Thread, "task_id", m.TaskID)
	if s := m.Source; s != nil {
		if len(b) > start {
			b = append(b, ',')
		}
		b = append(b, `"source":{`...)
		b = appendFields(b, "event", s.Event, "action", s.Action, "delivery_id", s.DeliveryID, "url", s.URL, "actor", s.Actor)
		b = append(b, '}')
	}
	if bu := m.Budget; bu != nil {
		if len(b) > start {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `"budget":{"tokens":%d`, bu.Tokens)
		if bu.Limit != 0 {
			b = fmt.Appendf(b, `,"limit":%d`, bu.Limit)
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
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
	v, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("tool_call.%s: %w", key, err)
	}
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	return append(b, v...), nil
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string exactly as encoding/json does
// (HTML-safe escapes, invalid UTF-8 as U+FFFD, U+2028/2029 escaped).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
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
