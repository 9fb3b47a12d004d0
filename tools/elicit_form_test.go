package tools

import (
	"encoding/json"
	"testing"
)

// FuzzFields feeds server-chosen schemas and a person's text to the form
// reader: no panics, and a parsed value always fits the field.
func FuzzFields(f *testing.F) {
	f.Add(`{"properties":{"n":{"type":"integer","minimum":1,"maximum":3}},"required":["n"]}`, "2")
	f.Add(`{"properties":{"e":{"enum":["a","b"],"enumNames":["A"]}}}`, "A")
	f.Add(`{"properties":{"m":{"type":"array","items":{"anyOf":[{"const":"x","title":"X"},{"const":1}]}}}}`, "x, 1")
	f.Add(`{"properties":{"b":{"type":"boolean","default":true}},"required":[1,"b"]}`, "no")
	f.Add(`{"properties":{"s":{"oneOf":[{"title":"t"}]}},"required":"s"}`, "")
	f.Fuzz(func(t *testing.T, schema, text string) {
		var s map[string]any
		if json.Unmarshal([]byte(schema), &s) != nil {
			return
		}
		for _, fl := range Fields(s) {
			v, err := fl.Parse(text)
			if err != nil {
				continue
			}
			switch fl.Type {
			case "number", "integer":
				n, ok := v.(float64)
				if !ok || fl.Minimum != nil && n < *fl.Minimum || fl.Maximum != nil && n > *fl.Maximum {
					t.Errorf("field %+v: %q parsed to %v", fl, text, v)
				}
			case "boolean":
				if _, ok := v.(bool); !ok {
					t.Errorf("field %+v: %q parsed to %v", fl, text, v)
				}
			}
		}
		_, _ = Defaults(s)
	})
}
