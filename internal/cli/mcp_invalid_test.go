package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

// mixedConfig is an mcp.json with server-everything under a gallery-style
// name, a valid entry named with spaces and one invalid entry (line 5).
func mixedConfig(t *testing.T, everything string) string {
	bin := testenv.NPMBin(t, "mcp-server-everything")
	return writeTemp(t, "mcp.json", fmt.Sprintf(`{
  "servers": {
    %q: {"command": %q, "args": ["stdio"], "gallery": "https://api.mcp.github.com", "version": "1.0.0"},
    "Dev Box MCP": {"command": %q, "args": ["stdio"], "disabled": true},
    "broken": {"command": "x", "timeout": "forever"}
  }
}
`, everything, bin, bin))
}

// One bad entry fails alone: `relay mcp list` lists it (state invalid, its
// file:line:col) beside the valid ones and exits 1; `test` and `call` of a
// valid server work, of the invalid one say why.
func TestMCPInvalidEntryFailsAlone(t *testing.T) {
	t.Parallel()
	env, _ := tokenServer(t)
	cfg := mixedConfig(t, "io.github.mcp/everything")
	env["RELAY_MCP_CONFIG"] = cfg
	cli := cliRunner(t, env)

	code, out, errs := cli("mcp", "list")
	if code != 1 {
		t.Errorf("mcp list: exit %d, want 1; stderr %q", code, errs)
	}
	for _, want := range []string{
		"io-github-mcp-everything (io.github.mcp/everything)",
		"Dev-Box-MCP (Dev Box MCP)",
		"broken", "invalid",
		"invalid: broken: " + cfg + ":5:32: server \"broken\": timeout:",
		"3 server(s) in " + cfg + " (1 invalid)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("mcp list: stdout %q lacks %q", out, want)
		}
	}
	if !strings.Contains(out, "ready") {
		t.Errorf("mcp list: stdout %q, want the valid server probed ready", out)
	}
	if !strings.Contains(errs, "1 invalid server entry") {
		t.Errorf("mcp list: stderr %q, want the invalid entry counted", errs)
	}
	if code, out, errs := cli("mcp", "list", "-json"); code != 1 || !strings.Contains(out, `"invalid":[{"name":"broken","id":"broken","reason":"`+cfg+`:5:32`) {
		t.Errorf("mcp list -json: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// By id or by the name as written.
	for _, name := range []string{"io-github-mcp-everything", "io.github.mcp/everything"} {
		if code, out, errs := cli("mcp", "test", name); code != 0 || !strings.Contains(out, "Healthy") {
			t.Errorf("mcp test %s: exit %d, stdout %q, stderr %q", name, code, out, errs)
		}
	}
	code, out, errs = cli("mcp", "call", "Dev Box MCP", "echo", "--args", `{"message": "alone"}`)
	if code != 0 || !strings.Contains(out, "Echo: alone") {
		t.Errorf("mcp call: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = cli("mcp", "test", "broken")
	if code != 1 || !strings.Contains(errs, `server "broken" is invalid in mcp.json: `+cfg+":5:32") {
		t.Errorf("mcp test broken: exit %d, stderr %q; want the reason with its place", code, errs)
	}

	// A file that cannot be read at all says where and exits 1.
	bad := maps.Clone(env)
	bad["RELAY_MCP_CONFIG"] = writeTemp(t, "mcp.json", "{\n  \"servers\": {\n    \"a\": {\"command\": \"x\",, }\n}\n")
	if code, _, errs := cliRunner(t, bad)("mcp", "test", "a"); code == 0 || !strings.Contains(errs, bad["RELAY_MCP_CONFIG"]+":3:") {
		t.Errorf("mcp test on an unreadable file: exit %d, stderr %q; want its place", code, errs)
	}
}

// A running relay reloads the valid entries, keeps the last good version
// of an entry that became invalid (saying so once) and, on a file it cannot
// read, keeps its servers and says where.
func TestRunningRelayKeepsLastGoodEntry(t *testing.T) {
	t.Parallel()
	env, _ := tokenServer(t)
	bin := testenv.NPMBin(t, "mcp-server-everything")
	cfg := writeTemp(t, "mcp.json", fmt.Sprintf(`{"servers": {"everything": {"command": %q, "args": ["stdio"]}}}`, bin))
	env["RELAY_MCP_CONFIG"] = cfg
	var logs syncBuffer
	stop := runRelay(t, env, []string{"toolrunner"}, &logs)
	defer stop()
	cli := cliRunner(t, env)
	type listed struct {
		Servers []struct {
			Name, State string
		} `json:"servers"`
		Invalid []struct {
			Name, Reason string
			Running      bool
		} `json:"invalid"`
	}
	list := func() (int, listed) {
		code, out, _ := cli("mcp", "list", "-json")
		var l listed
		_ = json.Unmarshal([]byte(out), &l)
		return code, l
	}
	testenv.WaitFor(t, 60*time.Second, "everything ready in the running relay", func() bool {
		code, l := list()
		return code == 0 && len(l.Servers) == 1 && l.Servers[0].State == "ready"
	})

	// everything becomes invalid; a new valid entry is added.
	testenv.WriteFile(t, cfg, fmt.Sprintf(`{"servers": {
  "everything": {"command": %q, "args": ["stdio"], "timeout": "forever"},
  "second": {"command": %q, "args": ["stdio"]}
}}`, bin, bin))
	var l listed
	testenv.WaitFor(t, 60*time.Second, "second added, everything kept", func() bool {
		var code int
		code, l = list()
		return code == 1 && len(l.Servers) == 2 && len(l.Invalid) == 1
	})
	if l.Servers[0].Name != "everything" || l.Servers[1].Name != "second" || !l.Invalid[0].Running ||
		!strings.HasPrefix(l.Invalid[0].Reason, cfg+":2:") {
		t.Fatalf("got %+v, want everything kept running and second added", l)
	}
	if code, out, _ := cli("mcp", "list"); code != 1 || !strings.Contains(out, "its last good version keeps running") {
		t.Errorf("mcp list: exit %d, stdout %q", code, out)
	}
	// The same file written again says nothing more.
	testenv.WriteFile(t, cfg, fmt.Sprintf(`{"servers": {
  "everything": {"command": %q, "args": ["stdio"], "timeout": "forever"},
  "second": {"command": %q, "args": ["stdio"], }
}}`, bin, bin))
	// A syntax error keeps both and says where.
	testenv.WriteFile(t, cfg, "{\"servers\": {\n  \"everything\": ,\n}}")
	testenv.WaitFor(t, 30*time.Second, "the syntax error reported", func() bool {
		return strings.Contains(logs.String(), "keeping the running servers")
	})
	if !strings.Contains(logs.String(), cfg+":2:") {
		t.Errorf("log %q does not say where the syntax error is", logs.String())
	}
	if n := strings.Count(logs.String(), "keeping its last good version running"); n != 1 {
		t.Errorf("said %d times that everything's last good version runs, want once; log:\n%s", n, logs.String())
	}
	if code, l := list(); code != 1 || len(l.Servers) != 2 {
		t.Errorf("after the syntax error: exit %d, %+v; want both servers still running", code, l)
	}
}
