package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
)

// everythingConfig writes an mcp.json running server-everything over stdio.
func everythingConfig(t *testing.T, name string) string {
	t.Helper()
	bin := testenv.NPMBin(t, "mcp-server-everything")
	return writeTemp(t, name, fmt.Sprintf("{\n  // JSONC, as VS Code writes it\n  \"servers\": {\"everything\": {\"command\": %q, \"args\": [\"stdio\"],},},\n}\n", bin))
}

func TestMCPCallPrintsEveryBlock(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	env["RELAY_MCP_CONFIG"] = everythingConfig(t, "mcp.json")
	save := t.TempDir()
	cli := cliRunner(t, env)
	code, out, errs := cli("mcp", "call", "everything", "get-tiny-image", "--save", save)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "[image image/png, ") || !strings.Contains(out, "saved to "+save) {
		t.Errorf("got stdout %q, want the image's MIME type, size and file", out)
	}
	files, _ := filepath.Glob(filepath.Join(save, "get-tiny-image-*.png"))
	if len(files) != 1 {
		t.Fatalf("saved files: got %v, want one PNG", files)
	}
	if b, _ := os.ReadFile(files[0]); !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("saved file is not a PNG")
	}
	if strings.Contains(out+errs, "server stderr") {
		t.Errorf("server stderr in the output without -v: %q", errs)
	}
	code, out, _ = cli("mcp", "call", "everything", "get-resource-links", "--args", `{"count": 2}`)
	if code != 0 || strings.Count(out, "[resource ") != 2 {
		t.Errorf("resource links: exit %d, got %q, want two URIs", code, out)
	}
	code, _, errs = cli("mcp", "call", "everything", "echo", "--args", `{"message": "x"}`, "-v")
	if code != 0 || !strings.Contains(errs, "server stderr") {
		t.Errorf("-v: exit %d, stderr %q; want the server's stderr", code, errs)
	}
	code, out, _ = cli("mcp", "test", "everything")
	if code != 0 || !strings.Contains(out, "status:       Healthy at 20") {
		t.Errorf("mcp test: exit %d, got %q, want Healthy with a timestamp", code, out)
	}
}

// `relay mcp list` names the file the running relay read, not the one in the
// CLI's own environment.
func TestMCPListNamesTheRunningRelaysFile(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	running := everythingConfig(t, "running.json")
	env["RELAY_MCP_CONFIG"] = running
	// /readyz waits for the servers' first attempt too.
	serveReady(t, env, nil, 30*time.Second)
	cliEnv := map[string]string{}
	for k, v := range env {
		cliEnv[k] = v
	}
	cliEnv["RELAY_MCP_CONFIG"] = everythingConfig(t, "other.json")
	type listed struct {
		Source  string `json:"source"`
		Config  string `json:"config"`
		Servers []struct {
			Name          string    `json:"name"`
			State         string    `json:"state"`
			Failures      int       `json:"failures"`
			LastConnected time.Time `json:"last_connected"`
		} `json:"servers"`
	}
	// On a loaded machine the first attempt may time out, and one `mcp list`
	// may find the runner too slow to answer and probe instead (it says so):
	// wait, as a user re-running the command would, for the running relay to
	// report the server ready.
	var got listed
	testenv.WaitFor(t, 60*time.Second, "mcp list to show everything ready", func() bool {
		var out, errb syncBuffer
		if code := Run(t.Context(), []string{"mcp", "list", "-json"}, config.FromMap(cliEnv), &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		got = listed{}
		if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		return got.Source == "running relay" && len(got.Servers) == 1 && got.Servers[0].State == "ready"
	})
	if got.Config != running || got.Source != "running relay" {
		t.Errorf("got config %q from %q, want %q from the running relay", got.Config, got.Source, running)
	}
	if len(got.Servers) != 1 || got.Servers[0].State != "ready" || got.Servers[0].LastConnected.IsZero() {
		t.Errorf("got servers %+v, want everything ready with its connect time", got.Servers)
	}
}

// `relay mcp disable|enable|stop|resume` write the tool runners' shared
// state; `relay mcp list` reads a disabled server back from it.
func TestMCPSwitchesWriteTheSharedState(t *testing.T) {
	t.Parallel()
	env, _ := tokenServer(t)
	env["RELAY_MCP_CONFIG"] = everythingConfig(t, "mcp.json")
	cli := cliRunner(t, env)
	listed := func() map[string]any {
		t.Helper()
		code, out, errs := cli("mcp", "list", "-json")
		var doc struct{ Servers []map[string]any }
		if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || len(doc.Servers) != 1 {
			t.Fatalf("mcp list: exit %d (%v), got %q, %s; want one server", code, err, out, errs)
		}
		return doc.Servers[0]
	}
	if code, out, errs := cli("mcp", "disable", "everything", "-reason", "maintenance"); code != 0 || !strings.HasPrefix(out, "disabled everything") {
		t.Fatalf("disable: exit %d, got %q, %s; want disabled everything", code, out, errs)
	}
	if s := listed(); s["state"] != "disabled" || s["disabled_reason"] != "maintenance" {
		t.Errorf("after disable: got %v, want disabled for maintenance", s)
	}
	if code, out, errs := cli("mcp", "enable", "everything"); code != 0 || !strings.HasPrefix(out, "enabled everything") {
		t.Fatalf("enable: exit %d, got %q, %s; want enabled everything", code, out, errs)
	}
	if s := listed(); s["state"] == "disabled" {
		t.Errorf("after enable: got %v, want it no longer disabled", s)
	} else if n, _ := s["tools"].(float64); n > 0 && s["tools_listed"] == nil {
		t.Errorf("after enable: %v tools but no tools_listed (probed now, listed during the probe)", n)
	}
	if code, _, _ := cli("mcp", "disable", "nosuch"); code == 0 {
		t.Error("disable of an unknown server: exit 0, want an error")
	}
	for _, tc := range []struct{ cmd, want string }{{"stop", "stop switch ON"}, {"resume", "stop switch OFF"}} {
		if code, out, errs := cli("mcp", tc.cmd); code != 0 || !strings.HasPrefix(out, tc.want) {
			t.Errorf("%s: exit %d, got %q, %s; want %s", tc.cmd, code, out, errs, tc.want)
		}
	}
}

// `relay mcp refresh [server]` asks the running tool runner to drop its
// cached tool lists: it names the runner to start when none runs, the
// servers refreshed when one does, and an unknown server as an error.
func TestMCPRefresh(t *testing.T) {
	t.Parallel()
	env, _ := tokenServer(t)
	env["RELAY_MCP_CONFIG"] = everythingConfig(t, "mcp.json")
	cli := cliRunner(t, env)
	// A listener that never answers, as the hooks worker and the agent are,
	// must not make the command wait out its timeout.
	nc, err := nats.Connect(env["NATS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("relay."+tools.SubjectRefresh, func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code, _, errs := cli("mcp", "refresh"); code != 1 || !strings.Contains(errs, "no tool runner answering") || time.Since(start) > 3*time.Second {
		t.Errorf("refresh without a runner: exit %d after %v, stderr %q; want 1 at once naming the runner to start", code, time.Since(start), errs)
	}
	var runnerLog syncBuffer
	stopRunner := runRelay(t, env, []string{"toolrunner"}, &runnerLog)
	defer func() {
		if code := stopRunner(); code != 0 {
			t.Errorf("tool runner: exit %d\n%s", code, runnerLog.String())
		}
	}()
	var (
		code      int
		out, errs string
	)
	testenv.WaitFor(t, 30*time.Second, "the tool runner to answer refresh", func() bool {
		code, out, errs = cli("mcp", "refresh")
		return code == 0
	})
	if !strings.HasPrefix(out, "refreshed the tool list of everything") {
		t.Errorf("refresh: got %q, %s", out, errs)
	}
	if code, out, errs = cli("mcp", "refresh", "everything"); code != 0 || !strings.HasPrefix(out, "refreshed the tool list of everything") {
		t.Errorf("refresh everything: exit %d, got %q, %s", code, out, errs)
	}
	if code, _, errs = cli("mcp", "refresh", "nosuch"); code != 1 || !strings.Contains(errs, `"nosuch"`) || !strings.Contains(errs, "unknown server") {
		t.Errorf("refresh nosuch: exit %d, stderr %q; want 1 naming the unknown server", code, errs)
	}
}

// The subcommands that only talk to the running relay over NATS work while
// this shell's mcp.json and policy are broken (mid-edit, say): the stop
// switch must work exactly then. `call` and `test`, which run the servers
// of those files, refuse them; a bad setting the command uses (NATS_URL)
// and an unknown RELAY_* variable are still errors.
func TestMCPRemoteSubcommandsIgnoreBrokenLocalFiles(t *testing.T) {
	t.Parallel()
	env, _ := tokenServer(t)
	env["RELAY_MCP_CONFIG"] = writeTemp(t, "mcp.json", `{"servers": {"half-edited": `)
	env["RELAY_POLICY"] = writeTemp(t, "policy.yaml", "roles: [not, a, map")
	cli := cliRunner(t, env)
	for _, tc := range []struct {
		args       []string
		code       int
		wantOut    string
		wantStderr string
	}{
		{[]string{"stop"}, 0, "stop switch ON", ""},
		{[]string{"resume"}, 0, "stop switch OFF", ""},
		{[]string{"active"}, 0, "0 active execution(s)", ""},
		{[]string{"disable", "everything"}, 0, "disabled everything", "RELAY_MCP_CONFIG"},
		{[]string{"enable", "everything"}, 0, "enabled everything", "RELAY_MCP_CONFIG"},
		{[]string{"list"}, 0, "0 server(s)", "RELAY_MCP_CONFIG"},
		{[]string{"refresh"}, 1, "", "no tool runner answering"},
		{[]string{"cancel", "nosuch"}, 1, "", "no tool runner answering"},
		{[]string{"call", "everything", "echo"}, 1, "", "configuration:\nRELAY_MCP_CONFIG"},
		{[]string{"test", "everything"}, 1, "", "configuration:\nRELAY_MCP_CONFIG"},
	} {
		code, out, errs := cli(append([]string{"mcp"}, tc.args...)...)
		if code == 0 && tc.code != 0 || code != 0 && code != tc.code {
			t.Errorf("mcp %v: exit %d, want %d; stderr %q", tc.args, code, tc.code, errs)
		}
		if !strings.Contains(out, tc.wantOut) || !strings.Contains(errs, tc.wantStderr) {
			t.Errorf("mcp %v: got stdout %q, stderr %q; want %q and %q", tc.args, out, errs, tc.wantOut, tc.wantStderr)
		}
		if tc.code == 0 && strings.Contains(errs, "configuration:") {
			t.Errorf("mcp %v: stderr %q refuses the configuration", tc.args, errs)
		}
	}
	// With a tool runner answering (its own, valid files), list reads
	// nothing of this shell's files and says nothing of them.
	runnerEnv := maps.Clone(env)
	runnerEnv["RELAY_MCP_CONFIG"] = everythingConfig(t, "running.json")
	delete(runnerEnv, "RELAY_POLICY")
	stopRunner := runRelay(t, runnerEnv, []string{"toolrunner"}, nil)
	defer stopRunner()
	testenv.WaitFor(t, 30*time.Second, "the tool runner to answer", func() bool {
		code, _, _ := cli("mcp", "refresh")
		return code == 0
	})
	if code, out, errs := cli("mcp", "list"); code != 0 || !strings.Contains(out, "status from running relay") || strings.Contains(errs, "RELAY_MCP_CONFIG") {
		t.Errorf("mcp list with a runner: exit %d, stdout %q, stderr %q; want the running relay's list, no word of the local files", code, out, errs)
	}
	if code, _, errs := cli("mcp", "cancel", "nosuch"); code != 1 || !strings.Contains(errs, "no active execution nosuch") {
		t.Errorf("mcp cancel nosuch with a runner: exit %d, stderr %q; want the runner's answer", code, errs)
	}
	for name, value := range map[string]string{"NATS_URL": "http://127.0.0.1:1", "RELAY_NO_SUCH_SETTING": "1"} {
		bad := maps.Clone(env)
		bad[name] = value
		if code, _, errs := cliRunner(t, bad)("mcp", "stop"); code == 0 || !strings.Contains(errs, "configuration:") || !strings.Contains(errs, name) {
			t.Errorf("mcp stop with %s=%s: exit %d, stderr %q; want the configuration refused naming %s", name, value, code, errs, name)
		}
	}
}

// An envFile's undefined ${VAR} makes compose-go's dotenv warn through
// logrus; the warning comes out as one of the relay's own (JSON) log lines,
// not as logrus text on the process's stderr. Not parallel: logrus's
// standard logger is the process's, routed by the last Run.
func TestEnvFileWarningIsARelayLogLine(t *testing.T) {
	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "server.env"), "GREETING=hello ${UNDEFINED_IN_THE_FILE}\n")
	cfg := filepath.Join(dir, "mcp.json")
	testenv.WriteFile(t, cfg, `{"servers": {"s": {"command": "/nonexistent/server", "envFile": "server.env"}}}`)
	env := map[string]string{"RELAY_MCP_CONFIG": cfg, "RELAY_DATA_DIR": t.TempDir(), "RELAY_LOG_FORMAT": "json",
		"NATS_URL": "nats://127.0.0.1:" + strings.Split(freeAddr(t), ":")[1]}
	_, _, errs := cliRunner(t, env)("mcp", "test", "s")
	var found bool
	for _, line := range strings.Split(errs, "\n") {
		var rec struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "WARN" && strings.Contains(rec.Msg, `"UNDEFINED_IN_THE_FILE" variable is not set`) {
			found = true
		}
	}
	if !found {
		t.Errorf("stderr %q: want the dotenv warning as a JSON log line at WARN", errs)
	}
}
