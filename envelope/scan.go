package envelope

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner reads raw JSON for the fast path of Parse (see parseFast). Every
// method returns false, and the fast path gives up, on anything it is not
// sure encoding/json decodes to the same value without error: a syntax
// error, invalid UTF-8 or a lone surrogate (which encoding/json replaces
// rather than refuses), a number a float64 cannot hold, nesting deeper than
// maxDepth.
type scanner struct {
	b []byte
	// src is b as one string: a string without escapes is a slice of it,
	// so a whole envelope costs one string allocation, not one per key and
	// value.
	src   string
	i     int
	depth int
}

// maxDepth bounds the nesting the fast path follows (encoding/json allows
// 10,000; anything deeper than this goes to the reference path).
const maxDepth = 256

// ws skips JSON whitespace.
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// eat consumes c if it is the next byte after whitespace.
func (s *scanner) eat(c byte) bool {
	if s.peek() == c && s.i < len(s.b) {
		s.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// null consumes a null literal if it is next.
func (s *scanner) null() bool {
	return s.peek() == 'n' && s.word("null")
}

// word consumes the literal w.
func (s *scanner) word(w string) bool {
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// members reads an object, calling field for each key with the scanner at
// its value; field must consume the value. Keys are unescaped.
func (s *scanner) members(field func(key string) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.depth++; s.depth > maxDepth {
		return false
	}
	defer func() { s.depth-- }()
	if s.eat('}') {
		return true
	}
	for {
		k, ok := s.str()
		if !ok || !s.eat(':') || !field(k) {
			return false
		}
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

// str reads a string as encoding/json decodes it.
func (s *scanner) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	start := s.i + 1
	high := false
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[start:j]
			if high && !utf8.Valid(v) {
				return "", false
			}
			s.i = j + 1
			return s.src[start:j], true
		case c == '\\':
			return s.escaped(start, j)
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			high = true
		}
	}
	return "", false
}

// escaped finishes a string whose first escape is at j.
func (s *scanner) escaped(start, j int) (string, bool) {
	buf := append(make([]byte, 0, len(s.b)-start), s.b[start:j]...)
	for j < len(s.b) {
		c := s.b[j]
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return "", false
			}
			s.i = j + 1
			return string(buf), true
		case c < 0x20:
			return "", false
		case c != '\\':
			buf = append(buf, c)
			j++
			continue
		}
		if j+1 >= len(s.b) {
			return "", false
		}
		if r, ok := simpleEscape(s.b[j+1]); ok {
			buf = append(buf, r)
			j += 2
			continue
		}
		r, n := s.unicodeEscape(j)
		if n == 0 {
			return "", false
		}
		buf = utf8.AppendRune(buf, r)
		j += n
	}
	return "", false
}

func simpleEscape(c byte) (byte, bool) {
	switch c {
	case '"', '\\', '/':
		return c, true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}

// unicodeEscape reads \uXXXX at j, or a surrogate pair of them, and returns
// the rune and the bytes read; 0 bytes for anything else (a lone surrogate
// too, which encoding/json would replace).
func (s *scanner) unicodeEscape(j int) (rune, int) {
	r := hex4(s.b, j)
	if r < 0 {
		return 0, 0
	}
	if !utf16.IsSurrogate(r) {
		return r, 6
	}
	r2 := hex4(s.b, j+6)
	if r >= 0xDC00 || r2 < 0xDC00 || r2 > 0xDFFF {
		return 0, 0
	}
	return utf16.DecodeRune(r, r2), 12
}

// hex4 reads `\uXXXX` at j, or -1.
func hex4(b []byte, j int) rune {
	if j+6 > len(b) || b[j] != '\\' || b[j+1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[j+2 : j+6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// number reads a number literal of the JSON grammar and returns its text.
func (s *scanner) number() ([]byte, bool) {
	b, j := s.b, s.i
	digits := func() bool {
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case !digits():
		return nil, false
	}
	if j < len(b) && b[j] == '.' {
		if j++; !digits() {
			return nil, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		if j++; j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if !digits() {
			return nil, false
		}
	}
	n := b[s.i:j]
	s.i = j
	return n, true
}

// integer reads a number into an integer of bits bits as encoding/json
// decodes one into an int field: no fraction or exponent.
func (s *scanner) integer(bits int) (int64, bool) {
	if c := s.peek(); c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	n, ok := s.number()
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(string(n), 10, bits)
	return v, err == nil
}

// value reads any value as encoding/json decodes it into an `any`:
// map[string]any, []any, float64, string, bool or nil.
func (s *scanner) value() (any, bool) {
	switch c := s.peek(); {
	case c == '"':
		return s.str()
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == 't':
		return true, s.word("true")
	case c == 'f':
		return false, s.word("false")
	case c == 'n':
		return nil, s.word("null")
	case c == '-' || c >= '0' && c <= '9':
		n, ok := s.number()
		if !ok {
			return nil, false
		}
		if f, ok := smallInteger(n); ok {
			return f, true
		}
		f, err := strconv.ParseFloat(string(n), 64)
		return f, err == nil
	}
	return nil, false
}

// smallInteger converts a number of at most 15 digits without a fraction or
// an exponent, which a float64 holds exactly, without strconv.ParseFloat
// (whose large frame grows the stack of a fresh handler goroutine).
func smallInteger(n []byte) (float64, bool) {
	digits := n
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 {
		return 0, false
	}
	var v int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if len(digits) != len(n) {
		if v == 0 {
			return 0, false // -0: ParseFloat keeps the sign
		}
		v = -v
	}
	return float64(v), true
}

// object reads an object into a map (the last of duplicate keys wins, as in
// encoding/json).
func (s *scanner) object() (map[string]any, bool) {
	m := make(map[string]any)
	ok := s.members(func(k string) bool {
		v, ok := s.value()
		m[k] = v
		return ok
	})
	return m, ok
}

// array reads an array into a slice, empty but not nil for `[]`.
func (s *scanner) array() ([]any, bool) {
	return elements(s, s.value)
}

// elements reads an array, each element with item, into a slice that is
// empty but not nil for `[]` (as encoding/json makes it).
func elements[T any](s *scanner, item func() (T, bool)) ([]T, bool) {
	if !s.eat('[') {
		return nil, false
	}
	if s.depth++; s.depth > maxDepth {
		return nil, false
	}
	defer func() { s.depth-- }()
	out := make([]T, 0)
	if s.eat(']') {
		return out, true
	}
	for {
		v, ok := item()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if s.eat(',') {
			continue
		}
		return out, s.eat(']')
	}
}
