package mcpconformance

import (
	"encoding/json"
	"os"

	"github.com/relaystation/relay/tools"
)

// A call is one tool call the client makes in a scenario.
type call struct {
	Tool string         `json:"name"`
	Args map[string]any `json:"arguments"`
}

// contextEnv is the suite's per-scenario context (JSON), e.g. the tool
// calls with their arguments that http-custom-headers wants made.
const contextEnv = "MCP_CONFORMANCE_CONTEXT"

// echoTool is the tool of json-schema-2020-12-preservation that wants the
// other tool's input schema back, verbatim, as its "schema" argument.
const echoTool = "json_schema_echo"

// listOnly are the scenarios whose server answers tools/list only (their
// checks are about what the client does with the list).
var listOnly = map[string]bool{"json-schema-ref-no-deref": true}

// plan is what the client calls after listing the tools (server-local
// names): the context's tool calls when the suite gives some; the echo of
// the schema preservation scenario; else every tool with arguments made
// from its input schema.
func plan(scenario string, list []tools.ToolInfo) []call {
	var ctx struct {
		ToolCalls []call `json:"toolCalls"`
	}
	if raw := os.Getenv(contextEnv); raw != "" && json.Unmarshal([]byte(raw), &ctx) == nil && len(ctx.ToolCalls) > 0 {
		return ctx.ToolCalls
	}
	if listOnly[scenario] {
		return nil
	}
	for _, t := range list {
		if t.Tool != echoTool {
			continue
		}
		var out []call
		for _, o := range list {
			if o.Tool != echoTool {
				out = append(out, call{Tool: echoTool, Args: map[string]any{"schema": o.InputSchema}})
			}
		}
		return out
	}
	out := make([]call, 0, len(list))
	for _, t := range list {
		out = append(out, call{Tool: t.Tool, Args: Args(t.InputSchema)})
	}
	return out
}
