package tools

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// schema2020 is a tool input schema in JSON Schema 2020-12 with a $ref: it
// must reach `relay mcp tools` unchanged.
const schema2020 = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "$defs": {"region": {"type": "string", "enum": ["us-west1", "us-east1"]}},
  "properties": {
    "region": {"$ref": "#/$defs/region"},
    "verbose": {"type": "boolean"},
    "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}
  },
  "required": ["region"],
  "unevaluatedProperties": false
}`

// argsServer has a tool "raw" with schema2020 that answers with the
// arguments it received, as JSON.
func argsServer(t *testing.T) string {
	s := mcp.NewServer(&mcp.Implementation{Name: "args", Version: "1.0.0"}, nil)
	s.AddTool(&mcp.Tool{Name: "raw", InputSchema: json.RawMessage(schema2020),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"integer"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res := textResult(string(req.Params.Arguments))
			res.StructuredContent = map[string]any{"n": 1}
			return res, nil
		})
	return (&verServer{}).serve(t, s, true)
}

// TestNullOptionalArgumentsOmitted: "verbose": null for an optional boolean
// means "not given": it is dropped before the check and the call; a null
// for a required argument is still refused.
func TestNullOptionalArgumentsOmitted(t *testing.T) {
	t.Parallel()
	r := startRunner(t, fastConfig(t, mcpconfig.Server{Name: "a", Type: mcpconfig.HTTP, URL: argsServer(t)}))
	args := map[string]any{"region": "us-west1", "verbose": nil}
	res := r.Call(t.Context(), Request{Tool: "a.raw", Args: args, Operator: true})
	if res.Err != nil || res.Text != `{"region":"us-west1"}` {
		t.Fatalf("got %q, %v; want the call without verbose", res.Text, res.Err)
	}
	if _, kept := args["verbose"]; !kept {
		t.Error("the caller's arguments were changed")
	}
	res = r.Call(t.Context(), Request{Tool: "a.raw", Args: map[string]any{"region": nil}, Operator: true})
	if res.Err == nil {
		t.Fatalf("a null required argument was accepted: %q", res.Text)
	}
}

// TestListServerToolsKeepsSchemas: `relay mcp tools` shows the schemas as
// the server sent them, $ref and 2020-12 keywords included.
func TestListServerToolsKeepsSchemas(t *testing.T) {
	t.Parallel()
	s := mcpconfig.Server{Name: "a", Type: mcpconfig.HTTP, URL: argsServer(t)}
	list, err := ListServerTools(t.Context(), fastConfig(t), s)
	if err != nil {
		t.Fatal(err)
	}
	if list.ProtocolVersion != mcpconfig.LatestProtocolVersion || len(list.Tools) != 1 {
		t.Fatalf("got %+v", list)
	}
	var want, got any
	_ = json.Unmarshal([]byte(schema2020), &want)
	b, _ := json.Marshal(list.Tools[0].InputSchema)
	_ = json.Unmarshal(b, &got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("input schema:\n got %s\nwant %s", b, schema2020)
	}
	b, _ = json.Marshal(list.Tools[0].OutputSchema)
	if string(b) != `{"$defs":{"n":{"type":"integer"}},"properties":{"n":{"$ref":"#/$defs/n"}},"type":"object"}` {
		t.Errorf("output schema: %s", b)
	}
}
