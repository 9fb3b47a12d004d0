package bundle

import (
	"fmt"
	"strings"
	"testing"
)

// bigConfig is a commented mcp.json with n stdio servers.
func bigConfig(n int) string {
	var b strings.Builder
	b.WriteString("{\n  // many servers\n  \"servers\": {\n")
	for i := range n {
		fmt.Fprintf(&b, "    \"s%d\": {\"command\": \"node\", \"args\": [\"s%d.js\"]}, // server %d\n", i, i, i)
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

// BenchmarkInstall measures one install into an mcp.json of 200 servers:
// dry run (parse, patch, duplicate rule, validation, diff) and written
// (plus lock, backup, fsync and rename of two files, then the uninstall).
func BenchmarkInstall(b *testing.B) {
	dir := relayBundle(b, "bench", "id: bench\nversion: '1'\nmcpServers:\n  a:\n    command: node\n    args: [a.js]\n  b:\n    url: https://b.example/mcp\n")
	b.Run("dry-run", func(b *testing.B) {
		in := newInstaller(b, bigConfig(200))
		for b.Loop() {
			if _, err := in.Install(b.Context(), dir, Options{DryRun: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("install+uninstall", func(b *testing.B) {
		in := newInstaller(b, bigConfig(200))
		for b.Loop() {
			if _, err := in.Install(b.Context(), dir, Options{}); err != nil {
				b.Fatal(err)
			}
			if _, err := in.Uninstall(b.Context(), "bench", Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
