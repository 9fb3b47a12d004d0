package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/config"
)

func TestMCPInstallUninstallBundles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mcp.json")
	orig := "{\n  // mine\n  \"servers\": {\n    \"mine\": {\"command\": \"node\"}\n  }\n}\n"
	if err := os.WriteFile(cfg, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(dir, "weather")
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := "id: weather\nversion: 0.3.0\nmcpServers:\n  forecast:\n    command: node\n    args: ['${bundlePath}/forecast.js']\n    env:\n      WEATHER_KEY: '${env:WEATHER_KEY}'\n"
	if err := os.WriteFile(filepath.Join(b, "bundle.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"RELAY_DATA_DIR": filepath.Join(dir, "data"), "RELAY_MCP_CONFIG": cfg}
	cli := func(args ...string) (int, string, string) {
		var out, errb syncBuffer
		code := Run(t.Context(), args, config.FromMap(env), &out, &errb)
		return code, out.String(), errb.String()
	}

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
