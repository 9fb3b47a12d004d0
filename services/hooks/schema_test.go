package hooks

import (
	"testing"

	"github.com/relaystation/relay/tools"
)

// TestInputSchemaFollowsTheTool: once a server changes a tool's inputSchema
// (a refetched tool list has the new one), arguments are checked against
// the new schema, not the one compiled first.
func TestInputSchemaFollowsTheTool(t *testing.T) {
	t.Parallel()
	s := &Service{schemas: map[string]compiledSchema{}}
	schema := func(typ string) tools.ToolInfo {
		return tools.ToolInfo{Name: "s.t", InputSchema: map[string]any{"type": "object", "required": []any{"n"},
			"properties": map[string]any{"n": map[string]any{"type": typ}}}}
	}
	args := map[string]any{"n": "seven"}
	for _, tc := range []struct {
		typ   string
		valid bool
	}{{"string", true}, {"integer", false}, {"string", true}} {
		sch, err := s.inputSchema(schema(tc.typ))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkArgs(sch, args); (err == nil) != tc.valid {
			t.Errorf("n of type %s: got %v, want valid %v", tc.typ, err, tc.valid)
		}
	}
}

// TestInputSchemaDraft07ByDefault: a schema that names no draft is read as
// draft-07, as the tool runner reads it, so a tuple `items` array (valid in
// draft-07, not in 2020-12) is checked, not refused.
func TestInputSchemaDraft07ByDefault(t *testing.T) {
	t.Parallel()
	s := &Service{schemas: map[string]compiledSchema{}}
	info := tools.ToolInfo{Name: "s.pair", InputSchema: map[string]any{"type": "object", "properties": map[string]any{
		"pair": map[string]any{"type": "array", "items": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}}}}
	sch, err := s.inputSchema(info)
	if err != nil {
		t.Fatalf("got %v, want the draft-07 schema compiled", err)
	}
	if err := checkArgs(sch, map[string]any{"pair": []any{"a", 1}}); err != nil {
		t.Errorf("[\"a\", 1]: got %v, want valid", err)
	}
	if err := checkArgs(sch, map[string]any{"pair": []any{1, "a"}}); err == nil {
		t.Error("[1, \"a\"]: got valid, want invalid")
	}
}
