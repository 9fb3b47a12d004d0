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
