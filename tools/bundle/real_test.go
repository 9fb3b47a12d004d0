package bundle

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// everythingBundle is a relay bundle directory whose server is
// @modelcontextprotocol/server-everything started through ${bundlePath}
// (its node_modules links to testdata/npm/node_modules).
func everythingBundle(t testing.TB, id string) string {
	t.Helper()
	mods := testenv.NPMModules(t, "server-everything", "@modelcontextprotocol/server-everything/dist/index.js")
	dir := filepath.Join(t.TempDir(), id)
	testenv.WriteFile(t, filepath.Join(dir, "bundle.json"), `{
  // A relay bundle around the reference server.
  "id": "`+id+`",
  "version": "2026.8.31",
  "mcpServers": {
    "everything": {
      "command": "node",
      "args": ["${bundlePath}/node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"],
    },
  },
}`)
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestInstalledEverythingServerRuns(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, commented)
	if _, err := in.Install(t.Context(), everythingBundle(t, "ref"), Options{}); err != nil {
		t.Fatal(err)
	}
	servers, err := mcpconfig.Load(in.Config, mcpconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(servers, func(s mcpconfig.Server) bool { return s.Name == "ref__everything" })
	if i < 0 {
		t.Fatalf("ref__everything not in %s", readFile(t, in.Config))
	}
	s := servers[i]
	ctx := t.Context()
	cmd := exec.Command(s.Command, s.Args...)
	client := mcp.NewClient(&mcp.Implementation{Name: "bundle-test", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second},
		&mcp.ClientSessionOptions{ProtocolVersion: s.ProtocolVersion})
	if err != nil {
		t.Fatalf("start the installed server: %v", err)
	}
	defer session.Close()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "from a bundle"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Content) == 0 {
		t.Fatal("echo returned nothing")
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "Echo: from a bundle" {
		t.Errorf("echo = %#v, want Echo: from a bundle", res.Content[0])
	}
}
