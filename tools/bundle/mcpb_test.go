package bundle

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// greetServer is a small Node MCP server speaking newline-delimited
// JSON-RPC on stdio: one tool, greet, answering with GREETING and whether
// API_KEY is set.
const greetServer = `const rl = require("readline").createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
rl.on("line", (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  switch (m.method) {
    case "initialize":
      return send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: m.params.protocolVersion,
        capabilities: { tools: {} }, serverInfo: { name: "greet", version: "1.0.0" } } });
    case "tools/list":
      return send({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "greet",
        inputSchema: { type: "object", properties: { who: { type: "string" } } } }] } });
    case "tools/call":
      return send({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text",
        text: process.env.GREETING + ", " + m.params.arguments.who + (process.env.API_KEY === "s3cret-key" ? " (keyed)" : " (no key)") }] } });
    default:
      return send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no " + m.method } });
  }
});
`

const greetManifest = `{
  "manifest_version": "0.2",
  "name": "Greeter Tools",
  "version": "1.0.0",
  "description": "Says hello",
  "author": {"name": "Relay tests"},
  "server": {
    "type": "node",
    "entry_point": "server/index.js",
    "mcp_config": {
      "command": "node",
      "args": ["${__dirname}/server/index.js"],
      "env": {"GREETING": "${user_config.greeting}", "API_KEY": "${user_config.api_key}"},
      "platform_overrides": {"win32": {"command": "node.exe"}}
    }
  },
  "user_config": {
    "greeting": {"type": "string", "title": "Greeting", "description": "How to greet", "required": true},
    "api_key": {"type": "string", "title": "API key", "description": "The service's key", "sensitive": true, "required": true}
  }
}`

// greetDir writes the greet bundle unpacked.
func greetDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "greeter")
	testenv.WriteFile(t, filepath.Join(dir, "manifest.json"), greetManifest)
	testenv.WriteFile(t, filepath.Join(dir, "server", "index.js"), greetServer)
	return dir
}

// packOfficial packs the greet bundle with the official packer
// (@anthropic-ai/mcpb from testdata/npm, or MCPB_BIN).
func packOfficial(t testing.TB) string {
	t.Helper()
	def := filepath.Join(repoRoot(), "testdata", "npm", "node_modules", ".bin", "mcpb")
	bin := testenv.Getenv("MCPB_BIN", def)
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "the mcpb packer is not installed; run scripts/setup.sh (npm ci in testdata/npm)")
	}
	out := filepath.Join(t.TempDir(), "greeter.mcpb")
	cmd := exec.Command(bin, "pack", greetDir(t), out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mcpb pack: %v\n%s", err, b)
	}
	return out
}

// packMCPB writes a .mcpb (zip) of the greet server with archive/zip.
func packMCPB(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "greeter.mcpb")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, body := range map[string]string{"manifest.json": greetManifest, "server/index.js": greetServer} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInstallMCPB(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("node"); err != nil {
		testenv.Missing(t, "node is not installed")
	}
	for _, tc := range []struct {
		name string
		pack func(testing.TB) string
	}{
		{"mcpb pack", packOfficial},
		{"zip", packMCPB},
		{"directory", greetDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testInstallMCPB(t, tc.pack(t))
		})
	}
}

func testInstallMCPB(t *testing.T, archive string) {
	in := newInstaller(t, commented)
	env := map[string]string{}
	in.Lookup = func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	// Missing values are named, and nothing is written or unpacked.
	_, err := in.Install(t.Context(), archive, Options{})
	if err == nil || !strings.Contains(err.Error(), "user_config.greeting is required") || !strings.Contains(err.Error(), "MCPB_USER_CONFIG_API_KEY") {
		t.Fatalf("got %v, want both missing values named", err)
	}
	if _, err := in.Install(t.Context(), archive, Options{Set: map[string]string{"greeting": "Hi", "api_key": "x"}}); err == nil || !strings.Contains(err.Error(), "sensitive") {
		t.Fatalf("got %v, want a sensitive value refused from --set", err)
	}
	if readFile(t, in.Config) != commented {
		t.Fatal("a failed install changed mcp.json")
	}
	if left, _ := filepath.Glob(filepath.Join(in.DataDir, "*", "*")); len(left) != 0 {
		t.Fatalf("a failed install left %v", left)
	}

	env["MCPB_USER_CONFIG_API_KEY"] = "s3cret-key"
	res, err := in.Install(t.Context(), archive, Options{Set: map[string]string{"greeting": "Hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != "Greeter-Tools" || slices.Compare(res.Added, []string{"Greeter-Tools__main"}) != 0 {
		t.Fatalf("got %s %v", res.ID, res.Added)
	}
	data := readFile(t, in.Config)
	if strings.Contains(data, "s3cret-key") || !strings.Contains(data, "${env:MCPB_USER_CONFIG_API_KEY}") {
		t.Fatalf("the sensitive value is not a reference:\n%s", data)
	}
	dir := filepath.Join(in.DataDir, "bundles", "Greeter-Tools", "1.0.0")
	if _, err := os.Stat(filepath.Join(dir, "server", "index.js")); err != nil {
		t.Fatalf("not unpacked under the data dir: %v", err)
	}
	if text, isError := callInstalled(t, in, "Greeter-Tools__main", "greet", map[string]any{"who": "relay"}); isError || text != "Hello, relay (keyed)" {
		t.Errorf("greet = %q (error %v), want Hello, relay (keyed)", text, isError)
	}

	if _, err := in.Uninstall(t.Context(), "Greeter-Tools", Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Errorf("uninstall left %s: %v", filepath.Dir(dir), err)
	}
	if readFile(t, in.Config) != commented {
		t.Errorf("uninstall did not restore mcp.json")
	}
}

// callInstalled starts the server the installer wrote into mcp.json as
// name (its command, arguments and environment, values looked up with
// in.Lookup, and PATH), calls tool with args and returns the text of the
// result.
func callInstalled(t *testing.T, in *Installer, name, tool string, args map[string]any) (text string, isError bool) {
	t.Helper()
	servers, err := mcpconfig.Load(in.Config, mcpconfig.Options{Lookup: in.Lookup})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(servers, func(s mcpconfig.Server) bool { return s.Name == name })
	if i < 0 {
		t.Fatalf("%s not in %s", name, readFile(t, in.Config))
	}
	s := servers[i]
	cmd := exec.Command(s.Command, s.Args...)
	for k, v := range s.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
	client := mcp.NewClient(&mcp.Implementation{Name: "bundle-test", Version: "1"}, nil)
	session, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second},
		&mcp.ClientSessionOptions{ProtocolVersion: s.ProtocolVersion})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	defer session.Close()
	out, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	for _, c := range out.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	return text, out.IsError
}

func TestMCPBUpgradeRemovesOldVersion(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, "")
	in.Lookup = func(k string) (string, bool) { return "key-value", k == "MCPB_USER_CONFIG_API_KEY" }
	set := Options{Set: map[string]string{"greeting": "Hi"}}
	v1 := greetDir(t)
	if _, err := in.Install(t.Context(), v1, set); err != nil {
		t.Fatal(err)
	}
	v2 := greetDir(t)
	testenv.WriteFile(t, filepath.Join(v2, "manifest.json"), strings.Replace(greetManifest, `"version": "1.0.0"`, `"version": "1.1.0"`, 1))
	res, err := in.Install(t.Context(), v2, set)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != "1.1.0" {
		t.Errorf("version %s, want 1.1.0", res.Version)
	}
	base := filepath.Join(in.DataDir, "bundles", "Greeter-Tools")
	if _, err := os.Stat(filepath.Join(base, "1.0.0")); !os.IsNotExist(err) {
		t.Errorf("1.0.0 still unpacked: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "1.1.0", "manifest.json")); err != nil {
		t.Errorf("1.1.0 not unpacked: %v", err)
	}
	if !strings.Contains(readFile(t, in.Config), filepath.Join(base, "1.1.0", "server", "index.js")) {
		t.Errorf("mcp.json does not point at 1.1.0:\n%s", readFile(t, in.Config))
	}
}
