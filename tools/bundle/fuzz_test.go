package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/internal/testenv"
)

// FuzzInstallUninstall: whatever mcp.json a user has, an install either
// fails leaving the file as it was, or writes a valid file with the
// bundle's server; uninstalling then gives back the original bytes when the
// file already had a server object.
func FuzzInstallUninstall(f *testing.F) {
	for _, seed := range []string{
		commented,
		"{}",
		"",
		"{\"mcpServers\": {}}",
		"{\n\t\"servers\": {\n\t\t\"a\": {\"command\": \"x\"},\n\t},\n\t\"inputs\": [],\n}\n",
		"{\"servers\": {\"a\": {\"url\": \"https://x/mcp\"}} /* end */}",
		"// top\n{\"mcpServers\": {\"a\": {\"command\": \"x\"} // after a\n}}",
		"{\"mcpServers\": {\"fz__s\": {\"command\": \"x\"}}}",
		"[1]",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	manifest := filepath.Join(dir, "fz", "bundle.yaml")
	testenv.WriteFile(f, manifest, "id: fz\nversion: '1'\nmcpServers:\n  s:\n    command: node\n    args: [s.js]\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		in := newInstaller(t, "")
		if len(data) > 0 {
			testenv.WriteFile(t, in.Config, string(data))
		}
		_, err := in.Install(t.Context(), manifest, Options{})
		if err != nil {
			if len(data) > 0 && readFile(t, in.Config) != string(data) {
				t.Fatalf("failed install (%v) changed the file", err)
			}
			return
		}
		after, _ := os.ReadFile(in.Config)
		if _, err := in.validate(t.Context(), after, []string{"fz__s"}); err != nil {
			t.Fatalf("install wrote an invalid file: %v\n%s", err, after)
		}
		if _, err := in.Uninstall(t.Context(), "fz", Options{}); err != nil {
			t.Fatalf("uninstall after install: %v\n%s", err, after)
		}
		final, _ := os.ReadFile(in.Config)
		if hadServerObject(data) && !bytes.Equal(final, data) {
			t.Fatalf("round trip changed the file:\n got %q\nwant %q", final, data)
		}
	})
}

func hadServerObject(data []byte) bool {
	if len(bytes.TrimSpace(data)) == 0 {
		return false
	}
	d, err := parseDocument(data)
	if err != nil {
		return false
	}
	lists := d.lists()
	for _, l := range lists {
		if len(l.Members) == 0 && len(l.AfterExtra) > 0 && len(bytes.TrimSpace(l.AfterExtra)) == 0 {
			return false // an empty "{\n  }" comes back as "{}"
		}
	}
	return len(lists) > 0
}

// FuzzLoadRelay: any manifest loads or fails with an error, never a panic
// or a blow-up.
func FuzzLoadRelay(f *testing.F) {
	f.Add([]byte("id: a\nversion: '1'\nmcpServers:\n  s:\n    command: node\n    args: [x]\n"), false)
	f.Add([]byte(`{"id": "a", "version": "1", "mcpServers": {"s": {"command": "node",},}, // c
}`), true)
	f.Add([]byte("a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\nid: a\nversion: '1'\nmcpServers:\n  s: {command: node, args: *c}\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		name := "bundle.yaml"
		if asJSON {
			name = "bundle.json"
		}
		p := filepath.Join(t.TempDir(), name)
		testenv.WriteFile(t, p, string(data))
		b, err := LoadRelay(p)
		if err != nil {
			return
		}
		if CheckID(b.ID) != nil || len(b.Servers) == 0 {
			t.Fatalf("loaded an invalid bundle: %+v", b)
		}
		for _, e := range b.Servers {
			if _, err := ServerName(b.ID, e.Name); err != nil || !json.Valid(e.JSON) {
				t.Fatalf("entry %s: %v, %s", e.Name, err, e.JSON)
			}
		}
	})
}

func TestAliasBombRefused(t *testing.T) {
	t.Parallel()
	var y strings.Builder
	y.WriteString("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&y, "l%d: &l%d [", i, i)
		for j := range 10 {
			if j > 0 {
				y.WriteString(", ")
			}
			fmt.Fprintf(&y, "*l%d", i-1)
		}
		y.WriteString("]\n")
	}
	y.WriteString("id: bomb\nversion: '1'\nmcpServers:\n  s: {command: node, args: *l8}\n")
	p := filepath.Join(t.TempDir(), "bundle.yaml")
	testenv.WriteFile(t, p, y.String())
	if _, err := LoadRelay(p); err == nil {
		t.Fatal("an alias bomb loaded")
	}
}
