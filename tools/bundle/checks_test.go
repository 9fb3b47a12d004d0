package bundle

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/internal/testenv"
)

// manifestDir is a bundle directory whose manifest has the given server
// and extra top-level members (JSON fragments).
func manifestDir(t *testing.T, server, extra string) string {
	t.Helper()
	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "manifest.json"), fmt.Sprintf(`{"manifest_version": "0.3", "name": "chk", "version": "1.0.0",
  "description": "d", "author": {"name": "t"}, "server": %s%s}`, server, extra))
	return dir
}

const nodeServer = `{"type": "node", "entry_point": "index.js", "mcp_config": {"command": "node", "args": ["${__dirname}/index.js"%s], "env": {%s}}}`

func TestMCPBChecks(t *testing.T) {
	t.Parallel()
	d1, d2 := t.TempDir(), t.TempDir()
	file := testenv.WriteFile(t, filepath.Join(t.TempDir(), "f.txt"), "x")
	for _, tc := range []struct {
		name          string
		server, extra string
		opts          Options
		want, absent  []string
		wantErr       string
		env           map[string]string // the relay's environment
	}{
		{name: "repeated --set gives each value its own argument",
			server: fmt.Sprintf(nodeServer, `, "${user_config.dirs}"`, ""),
			extra:  `, "user_config": {"dirs": {"type": "directory", "title": "d", "multiple": true}}`,
			opts:   Options{Values: map[string][]string{"dirs": {d1, d2}}},
			want:   []string{fmt.Sprintf("%q,\n", d1), fmt.Sprintf("%q\n", d2)}, absent: []string{d1 + "," + d2}},
		{name: "several values for a single setting",
			server:  fmt.Sprintf(nodeServer, `, "${user_config.dir}"`, ""),
			extra:   `, "user_config": {"dir": {"type": "directory", "title": "d"}}`,
			opts:    Options{Values: map[string][]string{"dir": {d1, d2}}},
			wantErr: `user_config.dir takes one value, got 2`},
		{name: "directory that does not exist",
			server:  fmt.Sprintf(nodeServer, `, "${user_config.dir}"`, ""),
			extra:   `, "user_config": {"dir": {"type": "directory", "title": "d"}}`,
			opts:    Options{Set: map[string]string{"dir": "/no/such/dir"}},
			wantErr: `user_config.dir: "/no/such/dir": no such file or directory`},
		{name: "a file where a directory is wanted",
			server:  fmt.Sprintf(nodeServer, `, "${user_config.dir}"`, ""),
			extra:   `, "user_config": {"dir": {"type": "directory", "title": "d"}}`,
			opts:    Options{Set: map[string]string{"dir": file}},
			wantErr: "is not a directory"},
		{name: "file value",
			server: fmt.Sprintf(nodeServer, `, "${user_config.f}"`, ""),
			extra:  `, "user_config": {"f": {"type": "file", "title": "f"}}`,
			opts:   Options{Set: map[string]string{"f": file}},
			want:   []string{file}},
		{name: "other platform refused",
			server: fmt.Sprintf(nodeServer, "", ""), extra: `, "compatibility": {"platforms": ["darwin"]}`,
			wantErr: "not compatible with this machine: compatibility.platforms is darwin, this is linux (--force installs it anyway)"},
		{name: "other platform with --force",
			server: fmt.Sprintf(nodeServer, "", ""), extra: `, "compatibility": {"platforms": ["darwin"]}`,
			opts: Options{Force: true}, want: []string{`"command": "node"`}},
		{name: "runtime present",
			server: fmt.Sprintf(nodeServer, "", ""), extra: `, "compatibility": {"platforms": ["linux", "darwin"], "runtimes": {"node": ">=16.0.0"}}`,
			want: []string{`"command": "node"`}},
		{name: "runtime outside the version range refused",
			server: fmt.Sprintf(nodeServer, "", ""), extra: `, "compatibility": {"runtimes": {"node": ">=99.0.0"}}`,
			wantErr: ", outside the range (--force installs it anyway)"},
		{name: "runtime outside the version range with --force",
			server: fmt.Sprintf(nodeServer, "", ""), extra: `, "compatibility": {"runtimes": {"node": ">=99.0.0"}}`,
			opts: Options{Force: true}, want: []string{`"command": "node"`}},
		{name: "python runtime in range",
			server: fmt.Sprintf(nodeServer, "", ""), extra: `, "compatibility": {"runtimes": {"python": ">=3.0 <4"}}`,
			want: []string{`"command": "node"`}},
		{name: "not a version range",
			server: fmt.Sprintf(nodeServer, "", ""), extra: `, "compatibility": {"runtimes": {"node": "sixteen"}}`,
			wantErr: "compatibility.runtimes.node (sixteen): not a version range"},
		{name: "relay secret refused",
			server:  fmt.Sprintf(nodeServer, `, "--token=${env:GITHUB_TOKEN}"`, `"S": "${env:SLACK_BOT_TOKEN}", "I": "${input:pat}"`),
			wantErr: "the server reads ${env:GITHUB_TOKEN}, ${env:SLACK_BOT_TOKEN}, ${input:pat} from the relay's environment, which the bundle was not given: allow each with --allow-env NAME"},
		{name: "relay secret allowed by name",
			server: fmt.Sprintf(nodeServer, "", `"S": "${env:SLACK_BOT_TOKEN}"`),
			opts:   Options{AllowEnv: []string{"SLACK_BOT_TOKEN"}, DryRun: true}, env: map[string]string{"SLACK_BOT_TOKEN": "xoxb-1"},
			want: []string{`+        "S": "${env:SLACK_BOT_TOKEN}"`}},
		{name: "allowed but not in the relay's environment",
			server:  fmt.Sprintf(nodeServer, "", `"S": "${env:SLACK_BOT_TOKEN}"`),
			opts:    Options{AllowEnv: []string{"SLACK_BOT_TOKEN"}, DryRun: true},
			wantErr: `would not load (checked by this process with the relay's settings (no running tool runner reads this file)), nothing was written: %CONFIG%:7:7: server "chk__main": env.S: environment variable SLACK_BOT_TOKEN is not set (${env:SLACK_BOT_TOKEN})`},
		{name: "sensitive value in args refused",
			server:  fmt.Sprintf(nodeServer, `, "--key", "${user_config.key}"`, ""),
			extra:   `, "user_config": {"key": {"type": "string", "title": "k", "sensitive": true}}`,
			wantErr: "sensitive user_config key would be passed in args"},
		{name: "own sensitive value in env is fine",
			server: fmt.Sprintf(nodeServer, "", `"K": "${user_config.key}"`),
			extra:  `, "user_config": {"key": {"type": "string", "title": "k", "sensitive": true}}`,
			absent: []string{"${env:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := newInstaller(t, `{"servers": {}}`)
			if tc.env != nil {
				in.Lookup = lookupOf(tc.env)
			}
			res, err := in.Install(t.Context(), manifestDir(t, tc.server, tc.extra), tc.opts)
			if tc.wantErr != "" {
				if want := strings.ReplaceAll(tc.wantErr, "%CONFIG%", in.Config); err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, want %q", err, want)
				}
				if got := readFile(t, in.Config); got != `{"servers": {}}` {
					t.Fatalf("refused install wrote %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := readFile(t, in.Config)
			if tc.opts.DryRun {
				got = res.Diff
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("got\n%s\nwant %q", got, w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(got, a) {
					t.Errorf("got\n%s\nwant no %q", got, a)
				}
			}
		})
	}
}

// server.type uv runs through uv when it is on PATH, else it is refused
// naming uv.
func TestMCPBTypeUV(t *testing.T) {
	t.Parallel()
	in := newInstaller(t, "")
	_, err := in.Install(t.Context(), manifestDir(t, `{"type": "uv", "entry_point": "src/server.py"}`, ""), Options{})
	if _, lerr := exec.LookPath("uv"); lerr != nil {
		if err == nil || !strings.Contains(err.Error(), `server.type "uv" needs uv on PATH`) {
			t.Fatalf("without uv: got %v, want uv named", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, in.Config); !strings.Contains(got, `"command": "uv"`) || !strings.Contains(got, `"run",`) || !strings.Contains(got, "src/server.py") {
		t.Fatalf("got %s, want uv run … src/server.py", got)
	}
}
