package bundle

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

// mcpbDir is a bundle directory holding manifest (with NAME, VERSION,
// ARGS, ENV and USERCONFIG filled in) and nothing else.
func mcpbDir(t testing.TB, name, version, args, env, userConfig string) string {
	t.Helper()
	dir := t.TempDir()
	n, _ := json.Marshal(name)
	v, _ := json.Marshal(version)
	m := fmt.Sprintf(`{"manifest_version": "0.3", "name": %s, "version": %s, "description": "d",
  "author": {"name": "t"},
  "server": {"type": "node", "entry_point": "index.js",
    "mcp_config": {"command": "node", "args": %s, "env": %s}},
  "user_config": %s}`, n, v, args, env, userConfig)
	testenv.WriteFile(t, filepath.Join(dir, "manifest.json"), m)
	return dir
}

// TestMCPBUserConfig: user_config values become arguments and env entries
// as MANIFEST.md says, and bad values are refused naming the setting.
func TestMCPBUserConfig(t *testing.T) {
	t.Parallel()
	home, _ := os.UserHomeDir()
	for _, tc := range []struct {
		name, args, env, uc string
		set                 map[string]string
		want, absent        []string
		wantErr             string
	}{
		{name: "optional sensitive not given is left out",
			args: `["${__dirname}/index.js"]`, env: `{"API_KEY": "${user_config.key}"}`,
			uc:     `{"key": {"type": "string", "title": "k", "sensitive": true}}`,
			absent: []string{"API_KEY", "${env:"}},
		{name: "directory list defaulting to [] is no argument",
			args: `["index.js", "${user_config.dirs}"]`, env: `{}`,
			uc:     `{"dirs": {"type": "directory", "title": "d", "multiple": true, "default": []}}`,
			absent: []string{`"[]"`}},
		{name: "directory list default expands to one argument each",
			args: `["index.js", "${user_config.dirs}"]`, env: `{}`,
			uc:   `{"dirs": {"type": "directory", "title": "d", "multiple": true, "default": ["${HOME}/a", "${DOCUMENTS}"]}}`,
			want: []string{`"` + home + `/a",`, `"` + filepath.Join(home, "Documents") + `"`}},
		{name: "desktop and downloads",
			args: `["${DESKTOP}", "${DOWNLOADS}"]`, env: `{}`, uc: `{}`,
			want: []string{filepath.Join(home, "Desktop"), filepath.Join(home, "Downloads")}},
		{name: "number above max",
			args: `["${user_config.n}"]`, env: `{}`,
			uc:  `{"n": {"type": "number", "title": "n", "min": 1, "max": 100}}`,
			set: map[string]string{"n": "500"}, wantErr: "user_config.n: 500 is above the maximum 100"},
		{name: "number not a number",
			args: `["${user_config.n}"]`, env: `{}`,
			uc:  `{"n": {"type": "number", "title": "n"}}`,
			set: map[string]string{"n": "abc"}, wantErr: `user_config.n: "abc" is not a number`},
		{name: "boolean",
			args: `["${user_config.b}"]`, env: `{}`,
			uc:  `{"b": {"type": "boolean", "title": "b"}}`,
			set: map[string]string{"b": "yes"}, wantErr: `user_config.b: "yes" is not a boolean`},
		{name: "number in range",
			args: `["${user_config.n}"]`, env: `{}`,
			uc:  `{"n": {"type": "number", "title": "n", "min": 1, "max": 100}}`,
			set: map[string]string{"n": "50"}, want: []string{`"50"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := newInstaller(t, "")
			in.Lookup = func(string) (string, bool) { return "", false }
			_, err := in.Install(t.Context(), mcpbDir(t, "Cfg", "1.0.0", tc.args, tc.env, tc.uc), Options{Set: tc.set})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				if _, err := os.Stat(in.Config); err == nil {
					t.Fatal("a refused install wrote mcp.json")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := readFile(t, in.Config)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("mcp.json lacks %s:\n%s", w, got)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(got, a) {
					t.Errorf("mcp.json holds %s:\n%s", a, got)
				}
			}
		})
	}
}

// TestMCPBNames: a name with letters outside ASCII keeps them as letters.
func TestMCPBNames(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"Ünïcode":     "Unicode",
		"Straße Tool": "Strasse-Tool",
		"工具":          "u5de5u5177",
		"Acme Tools":  "Acme-Tools",
	} {
		if got := sanitizeID(name); got != want {
			t.Errorf("sanitizeID(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestMCPBVersion: a version must be a semantic version.
func TestMCPBVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1.0.0\x00", "1.0", "latest", "../1.0.0", "1.0.0/x", ""} {
		in := newInstaller(t, "")
		_, err := in.Install(t.Context(), mcpbDir(t, "V", v, `[]`, `{}`, `{}`), Options{})
		if err == nil || !strings.Contains(err.Error(), "not a semantic version") {
			t.Errorf("version %q: got %v, want refused", v, err)
		}
	}
	in := newInstaller(t, "")
	if _, err := in.Install(t.Context(), mcpbDir(t, "V", "1.2.3-rc.1+b5", `[]`, `{}`, `{}`), Options{}); err != nil {
		t.Errorf("1.2.3-rc.1+b5: %v", err)
	}
}

// TestMCPBUnpackLimits: too many entries and a zip bomb are refused, also
// under --dry-run, and leave nothing behind.
func TestMCPBUnpackLimits(t *testing.T) {
	t.Parallel()
	manifest := `{"manifest_version": "0.3", "name": "Bomb", "version": "1.0.0", "description": "d", "author": {"name": "t"},
  "server": {"type": "node", "entry_point": "i.js", "mcp_config": {"command": "node", "args": []}}}`
	build := func(t *testing.T, add func(*zip.Writer)) string {
		p := filepath.Join(t.TempDir(), "b.mcpb")
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.Create("manifest.json")
		w.Write([]byte(manifest))
		add(zw)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		testenv.WriteFile(t, p, buf.String())
		return p
	}
	for _, tc := range []struct {
		name, want string
		add        func(*zip.Writer)
	}{
		{"entries", "at most 10000 allowed", func(zw *zip.Writer) {
			for i := range maxEntries {
				zw.Create(fmt.Sprintf("f/%d", i))
			}
		}},
		{"ratio", "unpacks to more than", func(zw *zip.Writer) {
			w, _ := zw.Create("zeros")
			zero := make([]byte, 1<<20)
			for range 40 {
				w.Write(zero)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			archive := build(t, tc.add)
			for _, dry := range []bool{true, false} {
				in := newInstaller(t, "")
				_, err := in.Install(t.Context(), archive, Options{DryRun: dry})
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("dry run %v: got %v, want %q", dry, err, tc.want)
				}
				if left, _ := filepath.Glob(filepath.Join(in.DataDir, "*")); len(left) != 0 {
					t.Fatalf("left %v", left)
				}
			}
		})
	}
}

// TestMCPBSameID: a bundle whose name makes the id of another installed
// bundle is refused naming both; the same bundle again is an upgrade.
func TestMCPBSameID(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, "")
	if _, err := in.Install(t.Context(), mcpbDir(t, "Acme Tools", "1.0.0", `["a"]`, `{}`, `{}`), Options{}); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, in.Config)
	_, err := in.Install(t.Context(), mcpbDir(t, "Acme_Tools", "1.0.0", `["b"]`, `{}`, `{}`), Options{})
	if err == nil || !strings.Contains(err.Error(), `installed bundle "Acme Tools"`) {
		t.Fatalf("got %v, want the second bundle refused", err)
	}
	if readFile(t, in.Config) != before {
		t.Fatal("the refused bundle changed mcp.json")
	}
	if _, err := in.Install(t.Context(), mcpbDir(t, "Acme Tools", "1.1.0", `["c"]`, `{}`, `{}`), Options{}); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
}

// TestMCPBStaleStaging: a staging folder left by a killed install is
// removed at the next install.
func TestMCPBStaleStaging(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, "")
	stale := filepath.Join(in.DataDir, ".bundle-killed")
	testenv.WriteFile(t, filepath.Join(stale, "manifest.json"), "{}")
	old := time.Now().Add(-2 * staleAfter)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Install(t.Context(), mcpbDir(t, "S", "1.0.0", `[]`, `{}`, `{}`), Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Fatal("the stale staging folder is still there")
	}
}

// TestMCPBRelativeCommand: a command with a path relative to the bundle
// (MANIFEST.md's binary example) is resolved against the bundle folder.
func TestMCPBRelativeCommand(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, "")
	dir := mcpbDir(t, "Bin", "1.0.0", `[]`, `{}`, `{}`)
	m := strings.Replace(readFile(t, filepath.Join(dir, "manifest.json")), `"command": "node"`, `"command": "server/my-server"`, 1)
	testenv.WriteFile(t, filepath.Join(dir, "manifest.json"), m)
	if _, err := in.Install(t.Context(), dir, Options{}); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(in.DataDir, "bundles", "Bin", "1.0.0", "server", "my-server")
	if got := readFile(t, in.Config); !strings.Contains(got, want) {
		t.Fatalf("mcp.json lacks %s:\n%s", want, got)
	}
}
