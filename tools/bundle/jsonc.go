package bundle

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/tailscale/hujson"
)

// The helpers below edit a hujson syntax tree in place, keeping every
// comment and the whitespace of the members they do not touch. New members
// are indented like their siblings, and a trailing comma after the last
// member is kept or left out as the file had it, so a plain JSON file stays
// plain JSON.

// member returns the member called name, or nil.
func member(obj *hujson.Object, name string) *hujson.ObjectMember {
	for i := range obj.Members {
		if n, ok := unquote(obj.Members[i].Name); ok && n == name {
			return &obj.Members[i]
		}
	}
	return nil
}

// unquote is the string value of a literal.
func unquote(v hujson.Value) (string, bool) {
	lit, ok := v.Value.(hujson.Literal)
	if !ok || lit.Kind() != '"' {
		return "", false
	}
	return lit.String(), true
}

// afterNewline is what follows the last newline of b when that is only
// spaces and tabs; ok is false when b has no newline.
func afterNewline(b []byte) (indent string, ok bool) {
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		return "", false
	}
	rest := string(b[i+1:])
	if strings.Trim(rest, " \t") != "" {
		return "", false
	}
	return rest, true
}

// indents returns the indentation of obj's members and of its closing
// brace; parent is the indentation of the line holding obj.
func indents(obj *hujson.Object, parent string) (memberIndent, closing string, multiline bool) {
	closing, multiline = afterNewline(obj.AfterExtra)
	if !multiline {
		closing = parent
	}
	for i := len(obj.Members) - 1; i >= 0; i-- {
		if ind, ok := afterNewline(obj.Members[i].Name.BeforeExtra); ok {
			return ind, closing, true
		}
	}
	unit := "  "
	if strings.HasPrefix(closing, "\t") {
		unit = "\t"
	}
	return closing + unit, closing, multiline
}

// hasTrailingComma reports whether obj's last member is followed by a comma.
func hasTrailingComma(obj *hujson.Object) bool {
	n := len(obj.Members)
	return n > 0 && obj.Members[n-1].Value.AfterExtra != nil
}

// addMember appends name: value (standard JSON) to obj, formatted as
// obj's other members are; parent is the indentation of obj's own line.
func addMember(obj *hujson.Object, parent, name string, value []byte) error {
	memberIndent, closing, multiline := indents(obj, parent)
	unit := strings.TrimPrefix(memberIndent, closing)
	if unit == "" || unit == memberIndent {
		unit = "  "
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, value, memberIndent, unit); err != nil {
		return err
	}
	v, err := hujson.Parse(buf.Bytes())
	if err != nil {
		return err
	}
	v.BeforeExtra = hujson.Extra(" ")
	v.AfterExtra = nil
	nameJSON, _ := json.Marshal(name)
	trailing := hasTrailingComma(obj)
	if n := len(obj.Members); n > 0 && !trailing {
		// The old last member is followed by a comma now; what came after
		// it (whitespace, a line comment) moves in front of the new one.
		last := &obj.Members[n-1].Value
		last.AfterExtra = hujson.Extra("")
	}
	m := hujson.ObjectMember{
		Name:  hujson.Value{BeforeExtra: hujson.Extra("\n" + memberIndent), Value: hujson.Literal(nameJSON)},
		Value: v,
	}
	if trailing {
		m.Value.AfterExtra = hujson.Extra("")
	}
	// What precedes the closing brace stays as it was, so removing the
	// member again gives back the same bytes; only an empty "{}" opens up
	// (and closes again when its last member goes).
	if len(obj.Members) == 0 && !multiline && len(bytes.TrimSpace(obj.AfterExtra)) == 0 {
		obj.AfterExtra = hujson.Extra("\n" + closing)
	}
	obj.Members = append(obj.Members, m)
	return nil
}

// removeMember deletes the member called name; it reports whether there
// was one.
func removeMember(obj *hujson.Object, name string) bool {
	for i := range obj.Members {
		n, ok := unquote(obj.Members[i].Name)
		if !ok || n != name {
			continue
		}
		last := i == len(obj.Members)-1
		trailing := hasTrailingComma(obj)
		obj.Members = append(obj.Members[:i], obj.Members[i+1:]...)
		if last && len(obj.Members) > 0 {
			nl := &obj.Members[len(obj.Members)-1].Value
			if trailing {
				if nl.AfterExtra == nil {
					nl.AfterExtra = hujson.Extra("")
				}
			} else {
				nl.AfterExtra = nil
			}
		}
		if len(obj.Members) == 0 && len(bytes.TrimSpace(obj.AfterExtra)) == 0 {
			obj.AfterExtra = nil // "{}"
		}
		return true
	}
	return false
}

// setMember sets name to value (standard JSON), replacing the value of an
// existing member in place.
func setMember(obj *hujson.Object, parent, name string, value []byte) error {
	if m := member(obj, name); m != nil {
		v, err := hujson.Parse(value)
		if err != nil {
			return err
		}
		m.Value.Value = v.Value
		return nil
	}
	return addMember(obj, parent, name, value)
}

// standard is a value as standard JSON.
func standard(v hujson.Value) []byte {
	c := v.Clone()
	c.Standardize()
	return bytes.TrimSpace(c.Pack())
}
