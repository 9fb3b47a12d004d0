package tools

import "math"

// shallowSchema is the shape most tools' input schemas take: an object
// whose properties each have at most one primitive type (string, boolean,
// number), some of them required, others maybe forbidden
// (additionalProperties: false), with nothing else but annotations. Such a
// schema is checked directly; a value it does not accept, and any schema
// of another shape, goes to the full validator (which also words the
// error). accepts never accepts what the full validator refuses.
type shallowSchema struct {
	props    map[string]string // property name -> its type, "" for any value
	required []string
	closed   bool // additionalProperties: false
}

// annotations are the keywords that do not constrain a value.
var annotations = map[string]bool{"title": true, "description": true, "$comment": true, "examples": true, "default": true}

// shallowOf returns the shallow form of a decoded schema document, or nil
// when it has another shape.
func shallowOf(doc any) *shallowSchema {
	m, ok := doc.(map[string]any)
	if !ok || m["type"] != "object" {
		return nil
	}
	s := &shallowSchema{props: map[string]string{}}
	for k, v := range m {
		switch {
		case k == "type" || k == "$schema" || annotations[k]:
		case k == "properties":
			if !s.addProps(v) {
				return nil
			}
		case k == "required":
			if !s.addRequired(v) {
				return nil
			}
		case k == "additionalProperties":
			b, ok := v.(bool)
			if !ok {
				return nil
			}
			s.closed = !b
		default:
			return nil
		}
	}
	return s
}

func (s *shallowSchema) addProps(v any) bool {
	props, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for name, p := range props {
		if b, ok := p.(bool); ok && b {
			s.props[name] = ""
			continue
		}
		pm, ok := p.(map[string]any)
		if !ok {
			return false
		}
		typ := ""
		for k, v := range pm {
			switch {
			case annotations[k]:
			case k == "type" && (v == "string" || v == "boolean" || v == "number"):
				typ = v.(string)
			default:
				return false
			}
		}
		s.props[name] = typ
	}
	return true
}

func (s *shallowSchema) addRequired(v any) bool {
	list, ok := v.([]any)
	if !ok {
		return false
	}
	for _, r := range list {
		name, ok := r.(string)
		if !ok {
			return false
		}
		s.required = append(s.required, name)
	}
	return true
}

// accepts reports whether v certainly satisfies the schema.
func (s *shallowSchema) accepts(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for _, name := range s.required {
		if _, ok := m[name]; !ok {
			return false
		}
	}
	for k, x := range m {
		typ, declared := s.props[k]
		switch {
		case !declared:
			if s.closed {
				return false
			}
		case typ == "":
			if !plain(x) {
				return false
			}
		case !hasType(x, typ):
			return false
		}
	}
	return true
}

// hasType reports whether x is a plain JSON value of type typ.
func hasType(x any, typ string) bool {
	switch v := x.(type) {
	case string:
		return typ == "string"
	case bool:
		return typ == "boolean"
	case float64:
		return typ == "number" && !math.IsNaN(v) && !math.IsInf(v, 0)
	case int, int64:
		return typ == "number"
	}
	return false
}
