package bundle

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/relaystation/relay/internal/testenv"
)

// exampleDir copies the mcpb repository's example name (testdata) into a
// temporary directory and links its node_modules to the npm fixtures'.
// hello-world-node's 500 KB icon is not in testdata: file-system-node's
// stands in for it.
func exampleDir(t *testing.T, name string) string {
	t.Helper()
	mods := testenv.NPMModules(t, "@modelcontextprotocol/sdk", "@modelcontextprotocol/sdk/package.json")
	dir := filepath.Join(t.TempDir(), name)
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "mcpb-examples", name))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "icon.png")); err != nil {
		icon := testenv.ReadFile(t, filepath.Join("testdata", "mcpb-examples", "file-system-node", "icon.png"))
		testenv.WriteFile(t, filepath.Join(dir, "icon.png"), string(icon))
	}
	return dir
}

// packed holds each example's archive, packed once per test process: the
// mcpb CLI zips the example with its node_modules (some 30 MB), the
// fixture's work rather than the installer's, and repeated for every
// -count it made the test outlast go test's timeout on a shared machine.
var packed sync.Map // example name -> func() ([]byte, error)

// packExample packs exampleDir(name) with the mcpb CLI from npm (once per
// test process) and returns a copy of the .mcpb archive.
func packExample(t *testing.T, name string) string {
	t.Helper()
	mcpb := testenv.NPMBin(t, "mcpb")
	dir := exampleDir(t, name)
	out := filepath.Join(t.TempDir(), name+".mcpb")
	pack, _ := packed.LoadOrStore(name, sync.OnceValues(func() ([]byte, error) {
		cmd := exec.CommandContext(t.Context(), mcpb, "pack", dir, out)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("mcpb pack %s: %v\n%s", name, err, b)
		}
		return os.ReadFile(out)
	}))
	archive, err := pack.(func() ([]byte, error))()
	if err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, out, string(archive))
	return out
}

// Every runnable example of the MCPB repository, packed by the mcpb CLI,
// installs, runs one tool and uninstalls, leaving mcp.json byte for byte
// as it was.
func TestMCPBExamples(t *testing.T) {
	t.Parallel()
	allowed := t.TempDir()
	testenv.WriteFile(t, filepath.Join(allowed, "note.txt"), "hello")
	for _, tc := range []struct {
		example string
		// unpacked installs the example's directory: the mcpb CLI (2.1.2)
		// refuses to pack file-system-node's manifest 0.1 (its "id" and
		// "privacy_policies" keys).
		unpacked bool
		opts     Options
		tool     string
		args     map[string]any
		want     string
	}{
		{example: "hello-world-node", tool: "get_current_time", args: map[string]any{}, want: "20"},
		{example: "file-system-node", unpacked: true, opts: Options{Values: map[string][]string{"allowed_directories": {allowed, t.TempDir()}}},
			tool: "list_allowed_directories", args: map[string]any{}, want: allowed},
	} {
		t.Run(tc.example, func(t *testing.T) {
			t.Parallel()
			var archive string
			if tc.unpacked {
				archive = exampleDir(t, tc.example)
			} else {
				archive = packExample(t, tc.example)
			}
			before := commented
			in := newInstaller(t, before)
			res, err := in.Install(t.Context(), archive, tc.opts)
			if err != nil {
				t.Fatalf("install: %v", err)
			}
			text, isError := callInstalled(t, in, res.Added[0], tc.tool, tc.args)
			if isError || !strings.Contains(text, tc.want) {
				t.Fatalf("%s = %q (error %v), want %q in it", tc.tool, text, isError, tc.want)
			}
			if _, err := in.Uninstall(t.Context(), res.ID, Options{}); err != nil {
				t.Fatalf("uninstall: %v", err)
			}
			if got := readFile(t, in.Config); got != before {
				t.Fatalf("after uninstall mcp.json is\n%s\nwant it byte for byte as before:\n%s", got, before)
			}
		})
	}
}

// chrome-applescript (its manifest's members the installer reads, as in the
// mcpb repository) is refused on Linux with the reason, before anything is
// written.
func TestMCPBExamplesRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, manifest, want string }{
		{"chrome-applescript", `{"manifest_version": "0.1", "name": "chrome-applescript", "version": "0.1.0",
  "server": {"type": "node", "entry_point": "server/index.js", "mcp_config": {"command": "node", "args": ["${__dirname}/server/index.js"], "env": {}}},
  "user_config": null, "compatibility": {"platforms": ["darwin"]}}`, "compatibility.platforms is darwin, this is linux"},
	} {
		in := newInstaller(t, commented)
		dir := t.TempDir()
		testenv.WriteFile(t, filepath.Join(dir, "manifest.json"), tc.manifest)
		if _, err := in.Install(t.Context(), dir, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
		if got := readFile(t, in.Config); got != commented {
			t.Errorf("%s: refused install changed mcp.json", tc.name)
		}
	}
}
