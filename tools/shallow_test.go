package tools

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const echoSchema = `{"type":"object","properties":{"message":{"type":"string","description":"Message to echo"}},` +
	`"required":["message"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`

func TestShallowOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, schema string
		shallow      bool
	}{
		{"echo", echoSchema, true},
		{"annotations and open", `{"type":"object","title":"t","properties":{"n":{"type":"number","default":1},"any":{},"t":true}}`, true},
		{"no properties", `{"type":"object"}`, true},
		{"a constraint", `{"type":"object","properties":{"s":{"type":"string","minLength":1}}}`, false},
		{"an integer", `{"type":"object","properties":{"i":{"type":"integer"}}}`, false},
		{"a type list", `{"type":"object","properties":{"s":{"type":["string","null"]}}}`, false},
		{"a nested object", `{"type":"object","properties":{"o":{"type":"object"}}}`, false},
		{"an enum", `{"type":"object","properties":{"e":{"enum":["a"]}}}`, false},
		{"additional schema", `{"type":"object","additionalProperties":{"type":"string"}}`, false},
		{"a false property", `{"type":"object","properties":{"f":false}}`, false},
		{"a ref", `{"type":"object","$ref":"#/$defs/x","$defs":{"x":{}}}`, false},
		{"not an object", `{"type":"string"}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(c.schema)))
			if err != nil {
				t.Fatal(err)
			}
			if got := shallowOf(doc) != nil; got != c.shallow {
				t.Errorf("shallow: got %v, want %v", got, c.shallow)
			}
		})
	}
}

// TestValidateArgsStillRefuses: what the shallow check does not accept
// still gets the validator's error.
func TestValidateArgsStillRefuses(t *testing.T) {
	t.Parallel()
	e := &toolEntry{info: ToolInfo{Name: "s.echo", InputSchema: mustDoc(t, echoSchema)}}
	if e.schemas(); e.shallow == nil {
		t.Fatal("echo's schema: got no shallow check, want one")
	}
	for _, c := range []struct {
		args map[string]any
		ok   bool
	}{
		{map[string]any{"message": "hi"}, true},
		{map[string]any{}, false},
		{map[string]any{"message": 1.0}, false},
		{map[string]any{"message": "hi", "extra": true}, false},
	} {
		err := e.validateArgs(c.args)
		if (err == nil) != c.ok {
			t.Errorf("args %v: got %v, want ok=%v", c.args, err, c.ok)
		}
	}
}

// FuzzShallowNeverAcceptsInvalid: whatever the shallow check accepts, the
// validator accepts too.
func FuzzShallowNeverAcceptsInvalid(f *testing.F) {
	f.Add([]byte(echoSchema), []byte(`{"message":"x"}`))
	f.Add([]byte(`{"type":"object","properties":{"n":{"type":"number"},"b":{"type":"boolean"},"a":true},"required":["n"]}`), []byte(`{"n":1e308,"b":false,"a":[{}],"z":null}`))
	f.Add([]byte(`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"number"}},"required":["n"]}`), []byte(`{"n":"1"}`))
	f.Add([]byte(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","additionalProperties":false}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
		if err != nil {
			return
		}
		s, _, err := compileSchemaDoc("fuzz/input.json", doc)
		if err != nil || s == nil {
			return
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
		if err != nil {
			return
		}
		for _, v := range []any{v, numbers(v, false), numbers(v, true)} {
			if sh := shallowOf(doc); sh != nil && sh.accepts(v) {
				if err := validate(s, v); err != nil {
					t.Fatalf("shallow accepted %v, validator: %v", v, err)
				}
			}
		}
	})
}

// numbers returns v with its json.Numbers as float64 or, with whole, as
// ints where whole (as Go callers pass them).
func numbers(v any, whole bool) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = numbers(e, whole)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = numbers(e, whole)
		}
		return out
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return v
		}
		if whole && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int(f)
		}
		return f
	}
	return v
}

func mustDoc(t *testing.T, s string) any {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(s)))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}
