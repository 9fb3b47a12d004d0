package cli

import (
	"encoding/json"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/relaystation/relay/config"
)

func TestReadVersion(t *testing.T) {
	t.Parallel()
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/relaystation/relay", Version: "v1.4.2"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-22T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want buildVersion
	}{
		{"stamped", stamped, true, buildVersion{Module: "github.com/relaystation/relay", Version: "v1.4.2",
			Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-11-22T10:00:00Z", Modified: true, GoVersion: "go1.26.0"}},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/relaystation/relay"}}, true,
			buildVersion{Module: "github.com/relaystation/relay", Version: "(devel)", GoVersion: "go1.26.0"}},
		{"no build info", nil, false, buildVersion{Module: "github.com/relaystation/relay", Version: "unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := readVersion(tc.bi, tc.ok); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestVersionWrite(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	buildVersion{Module: "m", Version: "v1", Revision: "abc", Time: "t", Modified: true, GoVersion: "go1"}.write(&b)
	want := "relay v1 (m)\nrevision: abc (modified)\ntime:     t\ngo:       go1\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	buildVersion{Module: "m", Version: "(devel)", GoVersion: "go1"}.write(&b)
	if !strings.Contains(b.String(), "revision: unknown") {
		t.Errorf("got %q, want the revision reported unknown", b.String())
	}
}

// TestVersionCommand runs `relay version -json` in-process: stdout is one JSON
// object naming the module, and nothing connects or checks settings.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	var out, errb syncBuffer
	code := Run(t.Context(), []string{"version", "-json"}, config.FromMap(map[string]string{"NATS_URL": "nats://127.0.0.1:1"}), &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var v buildVersion
	if err := json.Unmarshal([]byte(out.String()), &v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out.String())
	}
	if v.Module != "github.com/relaystation/relay" || v.GoVersion == "" {
		t.Errorf("got %+v, want module github.com/relaystation/relay and a Go version", v)
	}
}

// checkBinaryVersion runs `relay version -json` of a built binary: it reports
// what `go version -m` reads from the same file, and a VCS revision, when the
// toolchain stamped one, is the checkout's HEAD. (The go command stamps only
// in a checkout whose .git is a directory, not in a git worktree.)
func checkBinaryVersion(t *testing.T, bin string) {
	t.Helper()
	out, err := exec.Command(bin, "version", "-json").Output()
	if err != nil {
		t.Fatalf("relay version -json: %v", err)
	}
	var got buildVersion
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("relay version -json: not JSON: %v\n%s", err, out)
	}
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	want := buildVersion{Version: "(devel)"}
	for _, line := range strings.Split(string(meta), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			want.Module, want.Version = f[1], f[2]
		case len(f) == 2 && f[0] == "build":
			k, v, _ := strings.Cut(f[1], "=")
			switch k {
			case "vcs.revision":
				want.Revision = v
			case "vcs.time":
				want.Time = v
			case "vcs.modified":
				want.Modified = v == "true"
			}
		}
	}
	want.GoVersion = got.GoVersion
	if got != want {
		t.Errorf("relay version: got %+v, want %+v (from go version -m)", got, want)
	}
	if got.Revision == "" {
		t.Logf("binary built without VCS information: revision not compared with HEAD")
		return
	}
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err != nil || strings.TrimSpace(string(head)) != got.Revision {
		t.Errorf("got revision %s, want HEAD %s (%v)", got.Revision, head, err)
	}
}
