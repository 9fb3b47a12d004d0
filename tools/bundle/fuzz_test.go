package bundle

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
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
	writeFile(f, manifest, "id: fz\nversion: '1'\nmcpServers:\n  s:\n    command: node\n    args: [s.js]\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		in := newInstaller(t, "")
		if len(data) > 0 {
			writeFile(t, in.Config, string(data))
		}
		_, err := in.Install(t.Context(), manifest, Options{})
		if err != nil {
			if len(data) > 0 && readFile(t, in.Config) != string(data) {
				t.Fatalf("failed install (%v) changed the file", err)
			}
			return
		}
		after, _ := os.ReadFile(in.Config)
		if err := in.validate(after); err != nil {
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
