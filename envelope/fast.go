package envelope

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// parseFast decodes b in one pass, applying the schema's rules as it goes,
// when it can tell that parseChecked (the JSON Schema validator, the key-case
// check and encoding/json) would accept b and decode exactly this envelope.
// Whenever it cannot tell (anything invalid, and anything unusual: duplicate
// fields, null where a string or number could also be ignored, escapes in the
// timestamp, invalid UTF-8, a leap second, non-ASCII unknown keys) it returns
// false and Parse asks the reference, so rejections and their reasons are the
// validator's own. FuzzParseFastMatchesSchema keeps the two in step.
func parseFast(b []byte) (*Envelope, bool) {
	s := scanner{b: b, src: string(b)}
	e := new(Envelope)
	var seen uint16
	ok := s.members(func(k string) bool {
		bit, known := topBit[k]
		if !known {
			return s.unknown(k, "")
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return s.topField(e, k)
	})
	if !ok || !s.end() || seen&required != required {
		return nil, false
	}
	return e, true
}

// topBit numbers the envelope's fields for the duplicate and required checks.
var topBit = map[string]uint16{
	"id": 1 << 0, "timestamp": 1 << 1, "channel": 1 << 2, "role": 1 << 3, "content": 1 << 4,
	"context": 1 << 5, "tool_call": 1 << 6, "memory_update": 1 << 7, "retrieval_refs": 1 << 8, "meta": 1 << 9,
}

// required are the schema's required fields.
const required = 1<<5 - 1

// topField reads the value of the envelope's field k.
func (s *scanner) topField(e *Envelope, k string) bool {
	var ok bool
	switch k {
	case "id":
		e.ID, ok = s.str()
		return ok && isUUIDv4(e.ID)
	case "timestamp":
		return s.timestamp(&e.Timestamp)
	case "channel":
		var v string
		v, ok = s.str()
		e.Channel = Channel(v)
		return ok && validChannel(e.Channel)
	case "role":
		var v string
		v, ok = s.str()
		e.Role = Role(v)
		return ok && validRole(e.Role)
	case "content":
		e.Content, ok = s.str()
		return ok
	case "context":
		e.Context = new(Context)
		c := e.Context
		return s.strings("/context", &c.System, &c.Session, &c.Task)
	case "tool_call":
		e.ToolCall, ok = s.toolCall()
		return ok
	case "memory_update":
		e.MemoryUpdate, ok = s.memoryUpdate()
		return ok
	case "retrieval_refs":
		e.RetrievalRefs, ok = s.stringArray()
		return ok
	}
	return s.meta(&e.Meta)
}

func validChannel(c Channel) bool {
	switch c {
	case ChannelSlack, ChannelGitHub, ChannelSentry, ChannelOpenProject, ChannelInternal:
		return true
	}
	return false
}

func validRole(r Role) bool {
	switch r {
	case RoleUser, RoleAssistant, RoleTool, RoleSystem:
		return true
	}
	return false
}

// unknown reads the value of a key the object at path has no field for.
func (s *scanner) unknown(k, path string) bool {
	if !ignorable(k, path) {
		return false
	}
	_, ok := s.value()
	return ok
}

// ignorable reports whether k, a key the object at path has no field for,
// is one the schema leaves alone and encoding/json ignores: not one that
// differs from a field's name only in case (refused by checkKeyCase), nor one
// with non-ASCII letters (which encoding/json may fold onto a field's name).
func ignorable(k, path string) bool {
	for i := 0; i < len(k); i++ {
		if k[i] >= utf8.RuneSelf {
			return false
		}
	}
	for _, n := range knownKeys[path] {
		if len(k) == len(n) && equalFold(k, n) {
			return false
		}
	}
	return true
}

// fields reads an object whose fields are named knownKeys[path]: read(i)
// reads the value of the i-th, other keys go to other (s.unknown when nil).
// A field named twice goes to the reference path. It returns the fields seen,
// bit i for the i-th.
func (s *scanner) fields(path string, read func(i int) bool, other func(k string) bool) (uint8, bool) {
	names := knownKeys[path]
	var seen uint8
	ok := s.members(func(k string) bool {
		i := slices.Index(names, k)
		switch {
		case i < 0 && other != nil:
			return other(k)
		case i < 0:
			return s.unknown(k, path)
		case seen&(1<<i) != 0:
			return false
		}
		seen |= 1 << i
		return read(i)
	})
	return seen, ok
}

// strings reads an object whose fields, named knownKeys[path] in that order,
// are all strings: the i-th into ptrs[i].
func (s *scanner) strings(path string, ptrs ...*string) bool {
	_, ok := s.fields(path, func(i int) bool {
		var ok bool
		*ptrs[i], ok = s.str()
		return ok
	}, nil)
	return ok
}

// timestamp reads the timestamp: the decoded string must be a date-time the
// schema's format accepts, and its raw literal what time.Time decodes
// (encoding/json hands it the literal, escapes and all).
func (s *scanner) timestamp(t *time.Time) bool {
	if s.peek() != '"' {
		return false
	}
	start := s.i
	v, ok := s.str()
	return ok && isDateTime(v) && t.UnmarshalJSON(s.b[start:s.i]) == nil
}

// isDateTime reports whether v has the form YYYY-MM-DDTHH:MM:SS[.F+] then Z
// or ±HH:MM, each field in range and the seconds below 60: a subset of the
// schema's date-time format (which also takes a lower-case t or z and leap
// seconds; those go to the reference path).
func isDateTime(v string) bool {
	if len(v) < 20 || v[4] != '-' || v[7] != '-' || v[10] != 'T' || v[13] != ':' || v[16] != ':' {
		return false
	}
	y1, y2 := two(v, 0), two(v, 2)
	mo, d, h, mi, sec := two(v, 5), two(v, 8), two(v, 11), two(v, 14), two(v, 17)
	if y1 < 0 || y2 < 0 || mo < 1 || mo > 12 || d < 1 || d > daysIn(mo, y1*100+y2) ||
		h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 59 {
		return false
	}
	rest := v[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	if rest == "Z" {
		return true
	}
	if len(rest) != 6 || (rest[0] != '+' && rest[0] != '-') || rest[3] != ':' {
		return false
	}
	oh, om := two(rest, 1), two(rest, 4)
	return oh >= 0 && oh <= 23 && om >= 0 && om <= 59
}

// two reads two decimal digits at i, or -1.
func two(v string, i int) int {
	a, b := v[i], v[i+1]
	if a < '0' || a > '9' || b < '0' || b > '9' {
		return -1
	}
	return int(a-'0')*10 + int(b-'0')
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// toolCall reads tool_call: null, or an object with a non-empty name (its
// fields in knownKeys order: id, name, args, result).
func (s *scanner) toolCall() (*ToolCall, bool) {
	if s.null() {
		return nil, true
	}
	tc := new(ToolCall)
	_, ok := s.fields("/tool_call", func(i int) bool {
		var ok bool
		switch i {
		case 0:
			tc.ID, ok = s.str()
		case 1:
			tc.Name, ok = s.str()
		case 2:
			tc.Args, ok = s.object()
		default:
			if ok = s.null(); !ok {
				tc.Result, ok = s.object()
			}
		}
		return ok
	}, nil)
	return tc, ok && tc.Name != ""
}

// memoryUpdate reads memory_update: null, or an object with a kind of the
// enum, an object of data and a ttl that is a whole number from 0 (in
// knownKeys order: kind, data, ttl).
func (s *scanner) memoryUpdate() (*MemoryUpdate, bool) {
	if s.null() {
		return nil, true
	}
	m := new(MemoryUpdate)
	seen, ok := s.fields("/memory_update", func(i int) bool {
		switch i {
		case 0:
			v, ok := s.str()
			m.Kind = MemoryKind(v)
			return ok && (m.Kind == MemoryEpisodic || m.Kind == MemoryLongTerm)
		case 1:
			var ok bool
			m.Data, ok = s.object()
			return ok
		}
		var ok bool
		m.TTL, ok = s.integer(64)
		return ok && m.TTL >= 0
	}, nil)
	return m, ok && seen&3 == 3
}

// stringArray reads an array of strings, empty but not nil for `[]`.
func (s *scanner) stringArray() ([]string, bool) {
	return elements(s, s.str)
}

// meta reads meta as Meta.UnmarshalJSON does: the known fields (in knownKeys
// order: mcp_version, thread, task_id, source, budget), every other key into
// Extra (the last of duplicates winning, as in a map).
func (s *scanner) meta(m *Meta) bool {
	_, ok := s.fields("/meta", func(i int) bool {
		var ok bool
		switch i {
		case 0:
			m.MCPVersion, ok = s.str()
			ok = ok && isSemver(m.MCPVersion)
		case 1:
			m.Thread, ok = s.str()
		case 2:
			m.TaskID, ok = s.str()
		case 3:
			src := new(Source)
			m.Source = src
			ok = s.strings("/meta/source", &src.Event, &src.Action, &src.DeliveryID, &src.URL, &src.Actor)
		default:
			m.Budget, ok = s.budget()
		}
		return ok
	}, func(k string) bool { return s.extra(m, k) })
	return ok
}

// extra reads a meta key without a field into m.Extra.
func (s *scanner) extra(m *Meta, k string) bool {
	if !ignorable(k, "/meta") {
		return false
	}
	v, ok := s.value()
	if m.Extra == nil {
		m.Extra = make(map[string]any)
	}
	m.Extra[k] = v
	return ok
}

// budget reads meta.budget: an object (the schema asks nothing more) whose
// tokens and limit, when present, are whole numbers an int holds.
func (s *scanner) budget() (*Budget, bool) {
	bu := new(Budget)
	_, ok := s.fields("/meta/budget", func(i int) bool {
		v, ok := s.integer(strconv.IntSize)
		if i == 0 {
			bu.Tokens = int(v)
		} else {
			bu.Limit = int(v)
		}
		return ok
	}, nil)
	return bu, ok
}
