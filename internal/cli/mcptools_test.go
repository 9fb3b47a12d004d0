package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// `relay mcp tools` prints the tools with their schemas as sent, and `relay
// mcp test` the negotiated protocol version.
func TestMCPToolsPrintsSchemas(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	env["RELAY_MCP_CONFIG"] = everythingConfig(t, "mcp.json")
	cli := cliRunner(t, env)
	code, out, errs := cli("mcp", "tools", "everything", "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		ProtocolVersion string `json:"protocol_version"`
		Tools           []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var echo map[string]any
	for _, tl := range got.Tools {
		if tl.Name == "echo" {
			echo = tl.InputSchema
		}
	}
	props, _ := echo["properties"].(map[string]any)
	if got.ProtocolVersion != "2025-11-25" || props["message"] == nil {
		t.Errorf("got version %q, echo schema %v", got.ProtocolVersion, echo)
	}
	code, out, _ = cli("mcp", "tools", "everything")
	if code != 0 || !strings.Contains(out, "everything.echo") || !strings.Contains(out, "input schema:") {
		t.Errorf("text: exit %d, %q", code, out)
	}
	code, out, _ = cli("mcp", "test", "everything")
	if code != 0 || !strings.Contains(out, "protocol:     2025-11-25 (negotiated)") {
		t.Errorf("mcp test: exit %d, %q", code, out)
	}
}
