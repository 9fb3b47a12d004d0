package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/mcpconfig"
)

const commented = `// Servers for the relay.
{
  // Local tools.
  "mcpServers": {
    "files": {
      "command": "npx", // pinned below
      "args": ["-y", "@modelcontextprotocol/server-filesystem@2026.8.31", "/tmp"]
    }
  },
  /* Claude Desktop keeps this here too. */
  "globalShortcut": "Ctrl+Space"
}
`

func relayBundle(t testing.TB, id, body string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), id)
	testenv.WriteFile(t, filepath.Join(dir, "bundle.yaml"), body)
	return dir
}

func lookupAll(string) (string, bool) { return "secret-value", true }

func TestInstallPatchesJSONCAndUninstallRestoresIt(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, commented)
	dir := relayBundle(t, "acme", `id: acme
version: 1.2.0
description: Acme tools
mcpServers:
  search:
    command: node
    args: ["${bundlePath}/server.js", "--id", "${bundleId}@${bundleVersion}"]
    env:
      ACME_TOKEN: "${env:ACME_TOKEN}"
    description: Acme search
  api:
    type: http
    url: https://acme.example/mcp
    headers:
      Authorization: "Bearer ${env:ACME_TOKEN}"
`)
	in.Lookup = lookupOf(map[string]string{"ACME_TOKEN": "t"})
	res, err := in.Install(t.Context(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(res.Added, ","), "acme__search,acme__api"; got != want {
		t.Errorf("added %s, want %s", got, want)
	}
	got := readFile(t, in.Config)
	for _, c := range []string{"// Servers for the relay.", "// Local tools.", "// pinned below", "/* Claude Desktop keeps this here too. */", `"globalShortcut": "Ctrl+Space"`} {
		if !strings.Contains(got, c) {
			t.Errorf("comment or member %q lost:\n%s", c, got)
		}
	}
	if !strings.Contains(got, "\n    \"acme__search\": {\n      \"command\": \"node\",\n      \"args\": [") {
		t.Errorf("new server not indented like its siblings:\n%s", got)
	}
	if !strings.Contains(got, "${env:ACME_TOKEN}") {
		t.Errorf("${env:ACME_TOKEN} not kept for run time:\n%s", got)
	}
	if readFile(t, in.Config+".bak") != commented {
		t.Errorf(".bak is not the previous file")
	}
	servers, err := mcpconfig.Load(in.Config, mcpconfig.Options{Lookup: lookupAll})
	if err != nil {
		t.Fatalf("installed file does not load: %v", err)
	}
	if len(servers) != 3 {
		t.Fatalf("got %d servers, want 3", len(servers))
	}
	s := servers[1]
	wantArgs := []string{dir + "/server.js", "--id", "acme@1.2.0"}
	if s.Name != "acme__search" || strings.Join(s.Args, " ") != strings.Join(wantArgs, " ") || s.Env["ACME_TOKEN"] != "secret-value" {
		t.Errorf("got %s %v %v, want acme__search %v with the token", s.Name, s.Args, s.Env, wantArgs)
	}
	list, err := in.List()
	if err != nil || len(list) != 1 || list[0].ID != "acme" || list[0].Version != "1.2.0" || len(list[0].Servers) != 2 || list[0].Servers[0].Hash == "" {
		t.Fatalf("List = %+v, %v", list, err)
	}

	res, err = in.Uninstall(t.Context(), "acme", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 2 {
		t.Errorf("removed %v, want both servers", res.Removed)
	}
	if got := readFile(t, in.Config); got != commented {
		t.Errorf("uninstall did not restore the file byte for byte:\n got: %q\nwant: %q", got, commented)
	}
	if list, _ := in.List(); len(list) != 0 {
		t.Errorf("still tracked: %+v", list)
	}
}

func TestInstallIntoMissingAndPlainJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content string
		roundTrip     bool
	}{
		{"missing", "", false},
		{"plain", "{\n    \"servers\": {\n        \"a\": {\"command\": \"x\"}\n    }\n}\n", true},
		{"empty object", "{}", false}, // keeps the "mcpServers" it gained
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := newInstaller(t, tc.content)
			dir := relayBundle(t, "b1", "id: b1\nversion: '1'\nmcpServers:\n  s:\n    command: node\n")
			if _, err := in.Install(t.Context(), dir, Options{}); err != nil {
				t.Fatal(err)
			}
			data := readFile(t, in.Config)
			if !strings.HasPrefix(strings.TrimSpace(data), "{") || strings.Contains(data, ",\n}") || strings.Contains(data, ",}") {
				t.Errorf("not plain JSON:\n%s", data)
			}
			if _, err := mcpconfig.Parse([]byte(data), mcpconfig.Options{}); err != nil {
				t.Errorf("does not parse: %v\n%s", err, data)
			}
			if _, err := in.Uninstall(t.Context(), "b1", Options{}); err != nil {
				t.Fatal(err)
			}
			if tc.roundTrip && readFile(t, in.Config) != tc.content {
				t.Errorf("round trip changed the file:\n%s", readFile(t, in.Config))
			}
		})
	}
}

func TestBrokenBundleLeavesFileUnchanged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, manifest, want string }{
		{"unknown field", "id: bad\nversion: '1'\nmcpServers:\n  s:\n    command: node\n    comand: typo\n", "unknown field"},
		{"no command", "id: bad\nversion: '1'\nmcpServers:\n  s:\n    args: [x]\n", "required"},
		{"bad url", "id: bad\nversion: '1'\nmcpServers:\n  s:\n    url: ftp://x\n", "URL"},
		{"bad variable", "id: bad\nversion: '1'\nmcpServers:\n  s:\n    command: '${bundleDir}/x'\n", "unknown variable"},
		{"bad id", "id: 'a__b'\nversion: '1'\nmcpServers:\n  s:\n    command: node\n", "bundle id"},
		{"no version", "id: bad\nmcpServers:\n  s:\n    command: node\n", "version is required"},
		{"bad server name", "id: bad\nversion: '1'\nmcpServers:\n  's.x':\n    command: node\n", "server name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := newInstaller(t, commented)
			_, err := in.Install(t.Context(), relayBundle(t, "bad", tc.manifest), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
			if got := readFile(t, in.Config); got != commented {
				t.Errorf("mcp.json changed:\n%s", got)
			}
			for _, p := range []string{in.Config + ".bak", in.Config + TrackingSuffix} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s written: %v", p, err)
				}
			}
		})
	}
}

func TestDuplicatesDisabledThenReenabled(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, commented)
	same := "    command: node\n    args: [shared.js, --port, '3000']\n"
	one := relayBundle(t, "one", "id: one\nversion: '1'\nmcpServers:\n  shared:\n"+same+"    description: Shared by one\n")
	two := relayBundle(t, "two", "id: two\nversion: '1'\nmcpServers:\n  shared:\n"+same+"    description: Shared by two\n  own:\n    url: https://two.example/mcp\n")
	if _, err := in.Install(t.Context(), one, Options{}); err != nil {
		t.Fatal(err)
	}
	res, err := in.Install(t.Context(), two, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Disabled) != "[two__shared]" {
		t.Errorf("disabled %v, want [two__shared]", res.Disabled)
	}
	state := func() map[string]mcpconfig.Server {
		servers, err := mcpconfig.Load(in.Config, mcpconfig.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]mcpconfig.Server{}
		for _, s := range servers {
			out[s.Name] = s
		}
		return out
	}
	st := state()
	if s := st["two__shared"]; !s.Disabled || s.Description != "Duplicate of one__shared" {
		t.Errorf("two__shared: disabled=%v %q, want disabled, Duplicate of one__shared", s.Disabled, s.Description)
	}
	if s := st["one__shared"]; s.Disabled {
		t.Errorf("one__shared disabled")
	}
	// Installing two again changes nothing: the rule is stable.
	if res, err := in.Install(t.Context(), two, Options{DryRun: true}); err != nil || res.Diff != "" {
		t.Errorf("reinstall dry run: diff %q, %v", res.Diff, err)
	}

	res, err = in.Uninstall(t.Context(), "one", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Enabled) != "[two__shared]" {
		t.Errorf("enabled %v, want [two__shared]", res.Enabled)
	}
	st = state()
	if s := st["two__shared"]; s.Disabled || s.Description != "Shared by two" {
		t.Errorf("two__shared: disabled=%v %q, want enabled with its own description", s.Disabled, s.Description)
	}
	// The re-enabled server is not "edited": its bundle uninstalls cleanly.
	if _, err := in.Uninstall(t.Context(), "two", Options{}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, in.Config); got != commented {
		t.Errorf("file after both uninstalls:\n%s", got)
	}
}

func TestUninstallRefusesEditedServer(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, commented)
	dir := relayBundle(t, "ed", "id: ed\nversion: '1'\nmcpServers:\n  a:\n    command: node\n  b:\n    command: python3\n")
	if _, err := in.Install(t.Context(), dir, Options{}); err != nil {
		t.Fatal(err)
	}
	// The user moves ed__a to the end and edits ed__b.
	data := readFile(t, in.Config)
	edited := strings.Replace(data, `"python3"`, `"python3.12"`, 1)
	testenv.WriteFile(t, in.Config, edited)
	_, err := in.Uninstall(t.Context(), "ed", Options{})
	var ee *EditedError
	if !errors.As(err, &ee) || ee.Server != "ed__b" {
		t.Fatalf("got %v, want an EditedError for ed__b", err)
	}
	if readFile(t, in.Config) != edited {
		t.Errorf("refused uninstall changed the file")
	}
	if _, err := in.Uninstall(t.Context(), "ed", Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, in.Config); got != commented {
		t.Errorf("forced uninstall left:\n%s", got)
	}
	if _, err := in.Uninstall(t.Context(), "ed", Options{}); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("second uninstall: %v, want ErrNotInstalled", err)
	}
}

func TestUninstallFindsReorderedServers(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, "{\n  \"mcpServers\": {\n    \"mine\": {\"command\": \"x\"}\n  }\n}\n")
	dir := relayBundle(t, "ro", "id: ro\nversion: '1'\nmcpServers:\n  a:\n    command: node\n")
	if _, err := in.Install(t.Context(), dir, Options{}); err != nil {
		t.Fatal(err)
	}
	// The user moves the bundle's server before their own, reformatted.
	testenv.WriteFile(t, in.Config, "{\"mcpServers\": {\n\"ro__a\": { \"command\" : \"node\" },\n\"mine\": {\"command\": \"x\"}}}\n")
	if _, err := in.Uninstall(t.Context(), "ro", Options{}); err != nil {
		t.Fatal(err)
	}
	servers, err := mcpconfig.Load(in.Config, mcpconfig.Options{})
	if err != nil || len(servers) != 1 || servers[0].Name != "mine" {
		t.Fatalf("left %+v, %v; want only mine", servers, err)
	}
}

func TestDryRunPrintsDiffWritesNothing(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, commented)
	dir := relayBundle(t, "dry", "id: dry\nversion: '1'\nmcpServers:\n  a:\n    command: node\n")
	res, err := in.Install(t.Context(), dir, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Written || !strings.Contains(res.Diff, "+    \"dry__a\": {") || !strings.HasPrefix(res.Diff, "--- ") || !strings.Contains(res.Diff, "@@ -") {
		t.Errorf("diff:\n%s", res.Diff)
	}
	if readFile(t, in.Config) != commented {
		t.Errorf("dry run wrote mcp.json")
	}
	if _, err := os.Stat(in.Config + TrackingSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dry run wrote the tracking file")
	}
}

func TestConflictWithUserServer(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, "{\"mcpServers\": {\"cf__a\": {\"command\": \"mine\"}}}")
	dir := relayBundle(t, "cf", "id: cf\nversion: '1'\nmcpServers:\n  a:\n    command: node\n")
	var ce *ConflictError
	if _, err := in.Install(t.Context(), dir, Options{}); !errors.As(err, &ce) {
		t.Fatalf("got %v, want a ConflictError", err)
	}
}

func TestConcurrentInstalls(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, commented)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		id := fmt.Sprintf("c%d", i)
		dir := relayBundle(t, id, fmt.Sprintf("id: %s\nversion: '1'\nmcpServers:\n  s:\n    command: node\n    args: [%d.js]\n", id, i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each goroutine has its own Installer, as separate processes would.
			other := &Installer{Config: in.Config, DataDir: in.DataDir}
			_, errs[i] = other.Install(t.Context(), dir, Options{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("install %d: %v", i, err)
		}
	}
	servers, err := mcpconfig.Load(in.Config, mcpconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != n+1 {
		t.Errorf("got %d servers, want %d: an install lost another's", len(servers), n+1)
	}
	list, _ := in.List()
	if len(list) != n {
		t.Errorf("tracking has %d bundles, want %d", len(list), n)
	}
}

func TestUpgradeReplacesServers(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, "")
	v1 := relayBundle(t, "up", "id: up\nversion: '1'\nmcpServers:\n  a:\n    command: node\n  old:\n    command: node\n    args: [old.js]\n")
	v2 := relayBundle(t, "up", "id: up\nversion: '2'\nmcpServers:\n  a:\n    command: node\n    args: [v2.js]\n")
	if _, err := in.Install(t.Context(), v1, Options{}); err != nil {
		t.Fatal(err)
	}
	res, err := in.Install(t.Context(), v2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Removed, res.Added) != "[up__a up__old] [up__a]" {
		t.Errorf("removed %v added %v", res.Removed, res.Added)
	}
	list, _ := in.List()
	if len(list) != 1 || list[0].Version != "2" || len(list[0].Servers) != 1 {
		t.Errorf("tracking %+v", list)
	}
}

func TestWriteFailureLeavesFileUnchanged(t *testing.T) {
	t.Parallel()
	for _, failing := range []string{"mcp.json", "mcp.json.bak", "mcp.json.bundles.json"} {
		t.Run(failing, func(t *testing.T) {
			t.Parallel()
			in := newInstaller(t, commented)
			in.writeFile = func(path string, data []byte, perm os.FileMode) error {
				if filepath.Base(path) == failing {
					return errors.New("disk full")
				}
				return writeAtomic(path, data, perm)
			}
			dir := relayBundle(t, "wf", "id: wf\nversion: '1'\nmcpServers:\n  a:\n    command: node\n")
			if _, err := in.Install(t.Context(), dir, Options{}); err == nil || !strings.Contains(err.Error(), "disk full") {
				t.Fatalf("got %v, want the write error", err)
			}
			if got := readFile(t, in.Config); got != commented {
				t.Errorf("mcp.json changed:\n%s", got)
			}
			if _, err := os.Stat(in.Config + TrackingSuffix); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("tracking file written: %v", err)
			}
		})
	}
}

// A user's own server disabled as a duplicate gets its description back
// when it is enabled again.
func TestUserServerDescriptionRestored(t *testing.T) {
	t.Parallel()
	// "servers" is read first, so the bundle's server (added there) comes
	// before the user's in "mcpServers": the user's is the duplicate.
	orig := "{\n  \"servers\": {},\n  \"mcpServers\": {\n    \"mine\": {\"command\": \"node\", \"args\": [\"s.js\"], \"description\": \"My server\"}\n  }\n}\n"
	in := newInstaller(t, orig)
	b := relayBundle(t, "dup", "id: dup\nversion: '1'\nmcpServers:\n  s:\n    command: node\n    args: [s.js]\n")
	res, err := in.Install(t.Context(), b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Disabled) != "[mine]" || !strings.Contains(readFile(t, in.Config), `"description": "Duplicate of dup__s"`) {
		t.Fatalf("disabled %v:\n%s", res.Disabled, readFile(t, in.Config))
	}
	res, err = in.Uninstall(t.Context(), "dup", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Enabled) != "[mine]" {
		t.Errorf("enabled %v, want [mine]", res.Enabled)
	}
	if got := readFile(t, in.Config); got != orig {
		t.Errorf("user's server after uninstall:\n%s\nwant:\n%s", got, orig)
	}
	if tr, _ := in.List(); len(tr) != 0 {
		t.Errorf("still tracked: %+v", tr)
	}
}

// tree lists every path under root, relative to it.
func tree(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		out = append(out, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDryRunLeavesTheFilesystemUntouched: a dry run, of a relay bundle or
// an MCP Bundle, into an existing mcp.json or none, in an existing data
// directory or none, creates no file or directory (no lock, no bundles/).
func TestDryRunLeavesTheFilesystemUntouched(t *testing.T) {
	t.Parallel()
	relay := relayBundle(t, "dry", "id: dry\nversion: '1'\nmcpServers:\n  a:\n    command: node\n")
	mcpb := packMCPB(t)
	for _, tc := range []struct {
		name, source, config string
		dataDir              bool
	}{
		{"relay bundle", relay, commented, false},
		{"relay bundle, no mcp.json", relay, "", false},
		{"MCP Bundle", mcpb, commented, false},
		{"MCP Bundle, data dir exists", mcpb, commented, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := newInstaller(t, tc.config)
			in.Lookup = lookupAll
			if tc.dataDir {
				if err := os.Mkdir(in.DataDir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			root := filepath.Dir(in.Config)
			before := tree(t, root)
			res, err := in.Install(t.Context(), tc.source, Options{DryRun: true, Set: map[string]string{"greeting": "Hi"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Written || res.Diff == "" {
				t.Errorf("got written %v, diff %q; want a diff, nothing written", res.Written, res.Diff)
			}
			if after := tree(t, root); !slices.Equal(after, before) {
				t.Errorf("got files %v after the dry run, want %v", after, before)
			}
		})
	}
}

// An install writes only what the relay that runs the file loads: it asks
// Check (the running tool runner), and checks here with Lookup only when
// no relay can answer.
func TestInstallChecksWithTheRunningRelay(t *testing.T) {
	t.Parallel()
	manifest := `id: acme
version: 1.0.0
mcpServers:
  search:
    command: node
    env:
      ACME_TOKEN: "${env:ACME_TOKEN}"
`
	runnerEnv := map[string]string{"ACME_TOKEN": "t"} // the running relay has it, this shell does not
	runner := func(_ context.Context, path string, data []byte) ([]mcpconfig.Invalid, string, error) {
		f, err := mcpconfig.ParseFileAt(path, data, mcpconfig.Options{Lookup: lookupOf(runnerEnv)})
		if err != nil {
			return nil, "", err
		}
		return f.Invalid, "the running tool runner", nil
	}
	t.Run("the runner loads it", func(t *testing.T) {
		t.Parallel()
		in := newInstaller(t, `{"servers": {}}`)
		in.Check = runner
		res, err := in.Install(t.Context(), relayBundle(t, "acme", manifest), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.CheckedBy != "the running tool runner" || !slices.Equal(res.Added, []string{"acme__search"}) {
			t.Fatalf("checked by %q, added %v", res.CheckedBy, res.Added)
		}
	})
	t.Run("the runner would not load it", func(t *testing.T) {
		t.Parallel()
		in := newInstaller(t, `{"servers": {}}`)
		in.Lookup = lookupOf(runnerEnv) // this shell has it, the runner does not
		in.Check = func(ctx context.Context, path string, data []byte) ([]mcpconfig.Invalid, string, error) {
			f, err := mcpconfig.ParseFileAt(path, data, mcpconfig.Options{Lookup: lookupOf(nil)})
			if err != nil {
				return nil, "", err
			}
			return f.Invalid, "the running tool runner", nil
		}
		_, err := in.Install(t.Context(), relayBundle(t, "acme", manifest), Options{})
		if err == nil || !strings.Contains(err.Error(), "checked by the running tool runner") || !strings.Contains(err.Error(), "environment variable ACME_TOKEN is not set") {
			t.Fatalf("got %v, want the runner's refusal naming ACME_TOKEN", err)
		}
		if got := readFile(t, in.Config); got != `{"servers": {}}` {
			t.Fatalf("refused install wrote %q", got)
		}
	})
	t.Run("no runner: checked here", func(t *testing.T) {
		t.Parallel()
		in := newInstaller(t, `{"servers": {}}`)
		in.Check = func(context.Context, string, []byte) ([]mcpconfig.Invalid, string, error) {
			return nil, "", fmt.Errorf("nats: %w", ErrNoChecker)
		}
		_, err := in.Install(t.Context(), relayBundle(t, "acme", manifest), Options{})
		if err == nil || !strings.Contains(err.Error(), "checked by this process with the relay's settings") {
			t.Fatalf("got %v, want the local check's refusal", err)
		}
		in.Lookup = lookupOf(runnerEnv)
		res, err := in.Install(t.Context(), relayBundle(t, "acme", manifest), Options{})
		if err != nil || !strings.HasPrefix(res.CheckedBy, "this process") {
			t.Fatalf("got %v, checked by %q", err, res.CheckedBy)
		}
	})
}
