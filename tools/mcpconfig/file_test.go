package mcpconfig

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestLoadFileBadEntryFailsAlone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mcp.json")
	doc := `{
  // a comment
  "servers": {
    "good": {"command": "echo", "args": ["hi"]},
    "broken": {"command": "x", "timeout": "forever"},
    "remote": {"url": "http://127.0.0.1:9/mcp"},
    "typo": {"comand": "x"},
  }
}`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := LoadFile(path, Options{Lookup: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	var names []string
	for _, s := range f.Servers {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "good,remote" {
		t.Fatalf("valid servers = %v, want good,remote", names)
	}
	if len(f.Invalid) != 2 || f.Invalid[0].Name != "broken" || f.Invalid[1].Name != "typo" {
		t.Fatalf("invalid = %+v", f.Invalid)
	}
	if want := path + ":5:32: server \"broken\": timeout:"; !strings.HasPrefix(f.Invalid[0].Reason(), want) {
		t.Fatalf("reason %q, want prefix %q", f.Invalid[0].Reason(), want)
	}
	if want := path + ":7:14: server \"typo\": comand: unknown field"; f.Invalid[1].Reason() != want {
		t.Fatalf("reason %q, want %q", f.Invalid[1].Reason(), want)
	}
	if f.Invalid[0].Line != 5 {
		t.Fatalf("line %d, want 5", f.Invalid[0].Line)
	}
	// Load stays strict.
	if _, err := Load(path, Options{}); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("Load: %v, want the bad entry's error", err)
	}
}

func TestLoadFileSyntaxErrorIsWholeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, []byte("{\n  \"servers\": {\n    \"a\": {\"command\": \"x\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(path, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), path+":") || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("err = %v, want the file's place and 'not valid JSON'", err)
	}
}

func TestDuplicateEntryIsInvalidAlone(t *testing.T) {
	f, err := ParseFile([]byte(`{"servers": {"a": {"command": "x"}}, "mcpServers": {"a": {"command": "y"}, "b": {"command": "z"}}}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Servers) != 2 || f.Servers[0].Command != "x" || f.Servers[1].Name != "b" {
		t.Fatalf("servers = %+v", f.Servers)
	}
	if len(f.Invalid) != 1 || !strings.Contains(f.Invalid[0].Reason(), `defined in both "servers" and "mcpServers"`) {
		t.Fatalf("invalid = %+v", f.Invalid)
	}
}

var toolSafe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestServerIDs(t *testing.T) {
	for name, want := range map[string]string{
		"everything":               "everything",
		"microsoft/playwright-mcp": "microsoft-playwright-mcp",
		"io.github.owner/name":     "io-github-owner-name",
		"Dev Box MCP":              "Dev-Box-MCP",
		"Ünïcode server":           "Unicode-server",
		"日本":                       "u65e5u672c",
		"!!!":                      "server-" + ServerID("!!!")[7:],
	} {
		got := ServerID(name)
		if got != want {
			t.Errorf("ServerID(%q) = %q, want %q", name, got, want)
		}
		if !toolSafe.MatchString(got + "__tool") {
			t.Errorf("ServerID(%q) = %q is not tool-safe", name, got)
		}
		if ServerID(name) != got {
			t.Errorf("ServerID(%q) is not stable", name)
		}
	}
	long := strings.Repeat("a very long gallery name ", 5)
	id := ServerID(long)
	if len(id) > MaxIDLen || !toolSafe.MatchString(id) || id == ServerID(long+"x") {
		t.Fatalf("ServerID(long) = %q", id)
	}
}

func TestGalleryAndSpacedNamesKeepDisplayName(t *testing.T) {
	f, err := ParseFile([]byte(`{"servers": {
  "microsoft/playwright-mcp": {"type": "stdio", "command": "npx", "args": ["@playwright/mcp@latest"], "gallery": "https://api.mcp.github.com", "version": "0.0.1-seed"},
  "Dev Box MCP": {"command": "devbox", "enabled": true},
  "Dev-Box-MCP": {"command": "other"},
  "off": {"command": "x", "disabled": true, "autoApprove": ["a"], "alwaysAllow": []}
}}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Servers) != 3 {
		t.Fatalf("servers = %+v, invalid = %+v", f.Servers, f.Invalid)
	}
	if s := f.Servers[0]; s.Name != "microsoft-playwright-mcp" || s.DisplayName != "microsoft/playwright-mcp" {
		t.Fatalf("gallery server = %q (%q)", s.Name, s.DisplayName)
	}
	if s := f.Servers[1]; s.Name != "Dev-Box-MCP" || s.DisplayName != "Dev Box MCP" || s.Disabled {
		t.Fatalf("spaced server = %+v", s)
	}
	if len(f.Invalid) != 1 || !strings.Contains(f.Invalid[0].Reason(), `its id "Dev-Box-MCP" is the id of server "Dev Box MCP"`) {
		t.Fatalf("invalid = %+v", f.Invalid)
	}
	if s := f.Servers[2]; !s.Disabled {
		t.Fatalf("disabled server = %+v", s)
	}
	if len(f.Notes) != 1 || !strings.Contains(f.Notes[0], `server "off": ignored autoApprove, alwaysAllow`) {
		t.Fatalf("notes = %q", f.Notes)
	}
}
