package tools_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

type greetIn struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

// Run an MCP server built with the go-sdk (here over streamable HTTP, as a
// remote mcp.json entry), list the tools a role may call and call one.
func Example() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "greeter", Version: "1.0.0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "greet", Description: "Says hello", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in greetIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Hello, " + in.Name + "!"}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer hs.Close()

	// The policy grants the role "agent" every tool of the server "greeter".
	policy, err := mcpconfig.ParsePolicy([]byte(`{"roles": [{"role": "agent", "capabilities": ["greeter.*"]}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := tools.New(tools.Config{
		Servers: []mcpconfig.Server{{Name: "greeter", Type: mcpconfig.HTTP, URL: hs.URL, ProtocolVersion: mcpconfig.DefaultProtocolVersion}},
		Policy:  policy,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if notReady := r.WaitReady(ctx); len(notReady) > 0 {
		fmt.Println("not ready:", notReady)
		return
	}

	for _, t := range r.Tools(ctx, "agent") {
		fmt.Println(t.Name, "-", t.Description)
	}
	res := r.Call(ctx, tools.Request{
		CallID: "call-1",
		Tool:   "greeter.greet",
		Args:   map[string]any{"name": "Ada"},
		Caller: tools.Caller{AgentID: "agent-1", Role: "agent"},
	})
	fmt.Println(res.Status, res.Text)

	denied := r.Call(ctx, tools.Request{CallID: "call-2", Tool: "greeter.greet", Caller: tools.Caller{Role: "visitor"}})
	fmt.Println(denied.Status)
	// Output:
	// greeter.greet - Says hello
	// success Hello, Ada!
	// permission_denied
}
