package cli

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools/toolstest"
)

func TestMCPInstallUninstallBundles(t *testing.T) {
	t.Parallel()
	orig := "{\n  // mine\n  \"servers\": {\n    \"mine\": {\"command\": \"node\"}\n  }\n}\n"
	cfg := writeTemp(t, "mcp.json", orig)
	b := writeBundle(t, "weather", "id: weather\nversion: 0.3.0\nmcpServers:\n  forecast:\n    command: node\n"+
		"    args: ['${bundlePath}/forecast.js']\n    env:\n      WEATHER_KEY: '${env:WEATHER_KEY}'\n")
	env := map[string]string{"RELAY_DATA_DIR": t.TempDir(), "RELAY_MCP_CONFIG": cfg, "WEATHER_KEY": "k-1"}
	cli := cliRunner(t, env)

	code, out, errs := cli("mcp", "install", b, "--dry-run")
	if code != 0 || !strings.Contains(out, "+    \"weather__forecast\": {") || !strings.Contains(out, "+        \""+b+"/forecast.js\"") {
		t.Fatalf("dry run: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if got, _ := os.ReadFile(cfg); string(got) != orig {
		t.Fatalf("dry run wrote %s", got)
	}
	code, out, errs = cli("mcp", "install", "--config", cfg, b)
	if code != 0 || !strings.Contains(out, "installed weather 0.3.0") || !strings.Contains(out, "added: weather__forecast") {
		t.Fatalf("install: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = cli("mcp", "bundles", "-json")
	var list struct {
		Bundles []struct {
			ID      string `json:"id"`
			Version string `json:"version"`
			Servers []struct {
				Name string `json:"name"`
			} `json:"servers"`
		} `json:"bundles"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Bundles) != 1 || list.Bundles[0].ID != "weather" ||
		list.Bundles[0].Version != "0.3.0" || list.Bundles[0].Servers[0].Name != "weather__forecast" {
		t.Fatalf("bundles -json: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, _ = cli("mcp", "bundles"); code != 0 || !strings.Contains(out, "weather  0.3.0") {
		t.Errorf("bundles: exit %d, got %q", code, out)
	}
	code, out, errs = cli("mcp", "uninstall", "weather")
	if code != 0 || !strings.Contains(out, "removed: weather__forecast") {
		t.Fatalf("uninstall: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if got, _ := os.ReadFile(cfg); string(got) != orig {
		t.Errorf("after uninstall:\n%s\nwant:\n%s", got, orig)
	}
	if code, _, errs = cli("mcp", "uninstall", "weather"); code == 0 || !strings.Contains(errs, "not installed") {
		t.Errorf("second uninstall: exit %d, stderr %q", code, errs)
	}
}

// A bundle installed into the mcp.json of a running `relay serve` shows
// ready in `relay mcp list` without a restart, and leaves on uninstall.
func TestMCPInstallIntoRunningRelay(t *testing.T) {
	t.Parallel()
	b := toolstest.EverythingBundle(t)
	env := embeddedEnv(t)
	env["RELAY_MCP_CONFIG"] = writeTemp(t, "mcp.json", "{\n  // bundles go here\n  \"mcpServers\": {}\n}\n")
	defer serveReady(t, env, nil, 30*time.Second)()
	cli := cliRunner(t, env)
	list := func() (map[string]string, string) {
		code, out, errs := cli("mcp", "list", "-json")
		var got struct {
			Source  string `json:"source"`
			Servers []struct {
				Name  string `json:"name"`
				State string `json:"state"`
				Tools int    `json:"tools"`
			} `json:"servers"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Source != "running relay" {
			return nil, fmt.Sprintf("exit %d: %s %s", code, out, errs)
		}
		states := map[string]string{}
		for _, s := range got.Servers {
			states[s.Name] = fmt.Sprintf("%s/%d", s.State, s.Tools)
		}
		return states, out
	}

	if code, out, errs := cli("mcp", "install", b); code != 0 {
		t.Fatalf("install: exit %d: %s %s", code, out, errs)
	}
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		states, why := list()
		st := states["ref__everything"]
		return strings.HasPrefix(st, "ready/") && st != "ready/0", why
	})
	if code, out, errs := cli("mcp", "uninstall", "ref"); code != 0 {
		t.Fatalf("uninstall: exit %d: %s %s", code, out, errs)
	}
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		states, why := list()
		_, still := states["ref__everything"]
		return states != nil && !still, why
	})
}

// An install asks the running relay's tool runner whether it loads the new
// servers in its own environment: a variable only the relay has is fine, one
// only this shell has is refused before anything is written. Without a
// running relay the install checks with this shell's settings.
func TestMCPInstallCheckedByRunningRelay(t *testing.T) {
	t.Parallel()
	// The relay runs in this process: its tool runner reads the process
	// environment; the CLI reads only its env map.
	onlyRelay := "INSTALL_TEST_ONLY_RELAY_" + strings.ToUpper(rand.Text()[:8])
	onlyShell := "INSTALL_TEST_ONLY_SHELL_" + strings.ToUpper(rand.Text()[:8])
	os.Setenv(onlyRelay, "v")
	t.Cleanup(func() { os.Unsetenv(onlyRelay) })
	orig := "{\n  \"mcpServers\": {}\n}\n"
	env := embeddedEnv(t)
	env["RELAY_MCP_CONFIG"] = writeTemp(t, "mcp.json", orig)
	env[onlyShell] = "v"
	bundleReading := func(id, name string) string {
		return writeBundle(t, id, "id: "+id+"\nversion: 1.0.0\nmcpServers:\n  main:\n    command: node\n    args: ['-e', '']\n"+
			"    env:\n      K: '${env:"+name+"}'\n")
	}
	cli := cliRunner(t, env)

	// No relay yet: checked here, where onlyRelay is not set.
	code, out, errs := cli("mcp", "install", bundleReading("early", onlyRelay), "--allow-env", onlyRelay)
	if code == 0 || !strings.Contains(errs, "checked by this process with the relay's settings") || !strings.Contains(errs, onlyRelay+" is not set") {
		t.Fatalf("install without a relay: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	defer serveReady(t, env, nil, 30*time.Second)()
	// /readyz does not wait for the tool runner's requests: wait, as a user
	// would, until `relay mcp list` hears the running relay.
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		code, out, errs := cli("mcp", "list", "-json")
		var got struct {
			Source string `json:"source"`
		}
		return code == 0 && json.Unmarshal([]byte(out), &got) == nil && got.Source == "running relay", out + errs
	})
	code, out, errs = cli("mcp", "install", bundleReading("shell", onlyShell), "--allow-env", onlyShell)
	if code == 0 || !strings.Contains(errs, "checked by the running tool runner") || !strings.Contains(errs, onlyShell+" is not set") {
		t.Fatalf("install of a server only this shell could start: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if got, _ := os.ReadFile(env["RELAY_MCP_CONFIG"]); string(got) != orig {
		t.Fatalf("refused install wrote:\n%s", got)
	}
	code, out, errs = cli("mcp", "install", bundleReading("relay", onlyRelay), "--allow-env", onlyRelay)
	if code != 0 || !strings.Contains(out, "added: relay__main") || !strings.Contains(out, "checked by the running tool runner") {
		t.Fatalf("install of a server the relay can start: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// writeBundle makes the bundle directory name, in a new temporary
// directory, with manifest as its bundle.yaml, and returns its path.
func writeBundle(t *testing.T, name, manifest string) string {
	t.Helper()
	return filepath.Dir(testenv.WriteFile(t, filepath.Join(t.TempDir(), name, "bundle.yaml"), manifest))
}
