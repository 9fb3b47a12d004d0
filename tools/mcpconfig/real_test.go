package mcpconfig

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// realOutcome is what each real file in testdata/real gives (README.md
// there says why): "" when every entry loads, else a reason that must be
// named, for the whole file or for one entry (the others loading).
var realOutcome = map[string]string{
	"vscode-mcp-sampling.json":                       "not valid JSON or JSONC",
	"cursor-dubhe.json":                              `no "servers" (VS Code) or "mcpServers"`,
	"cursor-mcp-codeanalysis.json":                   `server "codeAnalysis": tools: unknown field`,
	"claude-book-api-mcp-docker-compose-bundle.json": `server "book-api-mcp-server-minikube": transport: wrong type`,
}

// realEnv supplies the ${input:…} and ${env:…} values the real files use,
// as a user would export them.
var realEnv = map[string]string{
	"HOME":                  "/home/user",
	"HOME_ASSISTANT_DOMAIN": "ha.example",
	"HOME_ASSISTANT_TOKEN":  "ha-token-value",
	"YOUTUBE_API_KEY":       "yt-key-value",
	"OBSIDIAN_API_KEY":      "obsidian-key-value",
}

// Every real config file collected from public repositories loads, or
// fails with the reason listed in its README, and only that entry fails.
func TestRealConfigFiles(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "real", "sources.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, _, _ := strings.Cut(sc.Text(), "\t")
		n++
		t.Run(name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := realEnv[k]; return v, ok }
			file, err := LoadFile(filepath.Join("testdata", "real", name), Options{Lookup: lookup, Workspace: "/work/project"})
			want := realOutcome[name]
			switch {
			case err != nil:
				if want == "" || !strings.Contains(err.Error(), want) {
					t.Fatalf("file refused: %v; want %q", err, want)
				}
				return
			case want == "" && len(file.Invalid) > 0:
				t.Fatalf("invalid entries: %v", file.Err())
			case want != "" && (len(file.Invalid) != 1 || !strings.Contains(file.Invalid[0].Reason(), want)):
				t.Fatalf("invalid entries %v, want one naming %q", file.Err(), want)
			}
			if want == "" && len(file.Servers) == 0 {
				t.Fatalf("no server loaded")
			}
			for _, s := range file.Servers {
				if !toolSafe.MatchString(s.Name) || s.DisplayName == "" {
					t.Errorf("server %q (%q): id not tool-safe", s.Name, s.DisplayName)
				}
			}
		})
	}
	if n < 20 {
		t.Fatalf("%d real files, want 20 or more", n)
	}
}
