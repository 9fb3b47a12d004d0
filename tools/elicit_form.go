package tools

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Field is one property of an elicitation schema: a flat object of string,
// number, integer, boolean and enum properties (arrays of enum values are
// multiple choices). Forms (the Slack one, the terminal one) are built from
// Fields and parse answers with Field.Parse.
type Field struct {
	Name        string
	Title       string
	Description string
	// Type is string, number, integer, boolean or array.
	Type string
	// Format is email, uri, date or date-time for strings.
	Format string
	// Options are the allowed values (enum, oneOf, anyOf; for arrays their items').
	Options  []Option
	Default  any
	Required bool
	// Minimum and Maximum bound numbers.
	Minimum, Maximum *float64
}

// Option is an allowed value and its title.
type Option struct{ Value, Title string }

// Label is the title, else the name.
func (f *Field) Label() string {
	if f.Title != "" {
		return f.Title
	}
	return f.Name
}

// Fields reads the properties of an elicitation schema, required ones
// first, then by name.
func Fields(schema map[string]any) []Field {
	props, _ := schema["properties"].(map[string]any)
	req := map[string]bool{}
	if r, ok := schema["required"].([]any); ok {
		for _, n := range r {
			if s, ok := n.(string); ok {
				req[s] = true
			}
		}
	}
	out := make([]Field, 0, len(props))
	for name, v := range props {
		p, _ := v.(map[string]any)
		f := Field{Name: name, Required: req[name], Default: p["default"]}
		f.Title, _ = p["title"].(string)
		f.Description, _ = p["description"].(string)
		f.Type, _ = p["type"].(string)
		f.Format, _ = p["format"].(string)
		f.Options = enumOptions(p)
		if f.Type == "array" {
			items, _ := p["items"].(map[string]any)
			f.Options = enumOptions(items)
		}
		if f.Type == "" && len(f.Options) > 0 {
			f.Type = "string"
		}
		f.Minimum, f.Maximum = number(p["minimum"]), number(p["maximum"])
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Required != out[j].Required {
			return out[i].Required
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// enumOptions reads enum (with the legacy enumNames), oneOf or anyOf of
// {const, title}.
func enumOptions(p map[string]any) []Option {
	var out []Option
	if e, ok := p["enum"].([]any); ok {
		names, _ := p["enumNames"].([]any)
		for i, v := range e {
			o := Option{Value: fmt.Sprint(v)}
			if i < len(names) {
				o.Title, _ = names[i].(string)
			}
			out = append(out, o)
		}
		return out
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		list, _ := p[k].([]any)
		for _, v := range list {
			m, _ := v.(map[string]any)
			c, ok := m["const"]
			if !ok {
				continue
			}
			o := Option{Value: fmt.Sprint(c)}
			o.Title, _ = m["title"].(string)
			out = append(out, o)
		}
	}
	return out
}

func number(v any) *float64 {
	switch n := v.(type) {
	case float64:
		return &n
	case int:
		f := float64(n)
		return &f
	}
	return nil
}

// ErrEmpty is Field.Parse's answer to an empty text.
var ErrEmpty = errors.New("empty")

// Parse turns a person's text into the field's value: numbers checked
// against the bounds, booleans from yes/no/true/false, options by value or
// title (arrays: comma-separated). Empty text is ErrEmpty.
func (f *Field) Parse(s string) (any, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, ErrEmpty
	}
	switch f.Type {
	case "number", "integer":
		n, err := strconv.ParseFloat(s, 64)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s is not a number", f.Label())
		case f.Type == "integer" && n != math.Trunc(n):
			return nil, fmt.Errorf("%s must be a whole number", f.Label())
		case f.Minimum != nil && n < *f.Minimum, f.Maximum != nil && n > *f.Maximum:
			return nil, fmt.Errorf("%s is out of range", f.Label())
		}
		return n, nil
	case "boolean":
		switch strings.ToLower(s) {
		case "y", "yes", "true", "on", "1":
			return true, nil
		case "n", "no", "false", "off", "0":
			return false, nil
		}
		return nil, fmt.Errorf("%s is yes or no", f.Label())
	case "array":
		var out []any
		for _, part := range strings.Split(s, ",") {
			v, err := f.option(strings.TrimSpace(part))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	if len(f.Options) > 0 {
		return f.option(s)
	}
	return s, nil
}

func (f *Field) option(s string) (any, error) {
	for _, o := range f.Options {
		if s == o.Value || (o.Title != "" && strings.EqualFold(s, o.Title)) {
			return o.Value, nil
		}
	}
	vals := make([]string, len(f.Options))
	for i, o := range f.Options {
		vals[i] = o.Value
	}
	return nil, fmt.Errorf("%s is one of %s", f.Label(), strings.Join(vals, ", "))
}
