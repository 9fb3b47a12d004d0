package mcpconfig

import (
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

// The files below are written the way each client writes them.
const vscodeJSONC = `// .vscode/mcp.json
{
  "inputs": [
    {"type": "promptString", "id": "github-token", "description": "GitHub token", "password": true},
    {"type": "promptString", "id": "region", "default": "eu-west-1"},
  ],
  "servers": {
    /* a local server */
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${input:github-token}", "REGION": "${input:region}",},
    },
    "sock": {"type": "http", "url": "unix:///run/mcp.sock#/mcp"}, // trailing comma next
  },
}
`

const claudeDesktop = `{
  "globalShortcut": "Ctrl+Space",
  "preferences": {"quickEntryShortcut": "off"},
  "mcpServers": {
    "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
    "remote": {"url": "https://mcp.example.com/sse", "type": "sse"}
  }
}`

const orchestrator = `{"mcpServers": {
  "jira": {"transport": "http", "baseURL": "https://jira.example.com/mcp", "capabilities": ["jira.read"], "timeout": "45s", "schemaVersion": "1.0.0"},
  "git": {"transport": "stdio", "command": "mcp-git", "env": {"GIT_TOKEN": "${GIT_TOKEN}", "MODE": "fast"}, "timeout": 10, "schemaVersion": "1.0.0"}
}}`

func TestCommonFilesLoad(t *testing.T) {
	t.Parallel()
	env := lookup(map[string]string{"GITHUB_TOKEN": "ghp_fromenv123", "GIT_TOKEN": "git-secret-value"})
	t.Run("vscode jsonc with inputs", func(t *testing.T) {
		t.Parallel()
		got, err := Parse([]byte(vscodeJSONC), Options{Lookup: env})
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		if len(got) != 2 {
			t.Fatalf("got %d servers, want 2", len(got))
		}
		gh := got[0]
		if gh.Env["GITHUB_PERSONAL_ACCESS_TOKEN"] != "ghp_fromenv123" || gh.Env["REGION"] != "eu-west-1" {
			t.Errorf("got env %v, want the input from GITHUB_TOKEN and region's default", gh.Env)
		}
		if strings.Join(gh.Secrets, ",") != "eu-west-1,ghp_fromenv123" {
			t.Errorf("got secrets %q, want both input values", gh.Secrets)
		}
		if gh.Line != 9 {
			t.Errorf("got line %d, want 9", gh.Line)
		}
		if got[1].Type != HTTP || got[1].URL != "unix:///run/mcp.sock#/mcp" {
			t.Errorf("got %+v, want a streamable HTTP server on a unix socket", got[1])
		}
	})
	t.Run("claude desktop keys ignored", func(t *testing.T) {
		t.Parallel()
		got, err := Parse([]byte(claudeDesktop), Options{Lookup: env})
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		if len(got) != 2 || got[0].Name != "memory" || got[1].Type != SSE {
			t.Fatalf("got %+v", got)
		}
		if !got[0].TypeInferred || got[1].TypeInferred {
			t.Errorf("TypeInferred: got %v, %v; want true, false", got[0].TypeInferred, got[1].TypeInferred)
		}
	})
	t.Run("orchestrator fields", func(t *testing.T) {
		t.Parallel()
		got, err := Parse([]byte(orchestrator), Options{Lookup: env})
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		jira, git := got[0], got[1]
		if jira.Type != HTTP || jira.URL != "https://jira.example.com/mcp" || jira.Timeout != 45*time.Second ||
			jira.SchemaVersion != "1.0.0" || len(jira.Capabilities) != 1 {
			t.Errorf("jira: got %+v", jira)
		}
		if git.Type != Stdio || git.Env["GIT_TOKEN"] != "git-secret-value" || git.Timeout != 10*time.Second {
			t.Errorf("git: got %+v", git)
		}
		if len(git.Secrets) != 1 || git.Secrets[0] != "git-secret-value" {
			t.Errorf("git secrets: got %q, want only the substituted token (MODE is plain)", git.Secrets)
		}
	})
}

func TestErrorsNameLineAndColumn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "mcp.json")
	doc := "{\n  // servers\n  \"servers\": {\n    \"a\": {\"command\": \"x\"},\n    \"b\": {\"command\": \"x\",\n           \"comand\": \"y\"}\n  }\n}\n"
	testenv.WriteFile(t, path, doc)
	_, err := Load(path, Options{Lookup: lookup(nil)})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want a *ValidationError", err)
	}
	if ve.Path != path || ve.Line != 6 || ve.Column != 12 || ve.Server != "b" || ve.Field != "comand" {
		t.Errorf("got %+v (%v), want %s line 6 column 12, server b, field comand", ve, err, path)
	}
	if want := path + ":6:12: server \"b\": comand: unknown field"; err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	// A syntax error has its place too.
	testenv.WriteFile(t, path, "{\n  \"servers\": {\n    \"a\": {\"command\": \"x\"}}\n  oops\n}")
	_, err = Load(path, Options{})
	if !errors.As(err, &ve) || ve.Line != 4 {
		t.Errorf("got %v, want a syntax error on line 4", err)
	}
}

func TestUnixSocket(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, sock, path string }{
		{"unix:///run/mcp.sock", "/run/mcp.sock", "/"},
		{"unix:///run/mcp.sock#/mcp", "/run/mcp.sock", "/mcp"},
		{"unix:///run/mcp.sock/mcp", "/run/mcp.sock", "/mcp"},
		{"unix:///tmp/dir/sock#sse", "/tmp/dir/sock", "/sse"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if sock, p := UnixSocket(u); sock != tt.sock || p != tt.path {
			t.Errorf("%s: got %q %q, want %q %q", tt.in, sock, p, tt.sock, tt.path)
		}
	}
}

func TestEnvFileDotenv(t *testing.T) {
	t.Parallel()
	src := "# comment\nexport A=1\nB=\"two words\"\nC='x=y'\nD=plain # trailing comment\nE=\"line1\\nline2\"\nF=\"multi\nline\"\nG=${A}-x\n"
	got, err := ParseEnvFile([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "1", "B": "two words", "C": "x=y", "D": "plain", "E": "line1\nline2", "F": "multi\nline", "G": "1-x"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if _, err := ParseEnvFile([]byte("A=\"unterminated\n")); err == nil {
		t.Error("unterminated quote: got nil error")
	}
}

// TestVSCodeVariables: ${workspaceFolder} is the folder holding .vscode or
// .cursor (or RELAY_WORKSPACE), as VS Code and Cursor resolve it.
func TestVSCodeVariables(t *testing.T) {
	t.Parallel()
	const file = `{"servers": {"s": {"command": "node",
		"args": ["${workspaceFolder}${/}srv.js", "${workspaceFolderBasename}", "${userHome}${pathSeparator}x"],
		"cwd": "${workspaceFolder}"}}}`
	root := t.TempDir()
	sep := string(filepath.Separator)
	for _, tc := range []struct {
		name, dir, env, want string
	}{
		{"vscode", filepath.Join(root, "proj", ".vscode"), "", filepath.Join(root, "proj")},
		{"cursor", filepath.Join(root, "cur", ".cursor"), "", filepath.Join(root, "cur")},
		{"plain folder", filepath.Join(root, "plain"), "", filepath.Join(root, "plain")},
		{"RELAY_WORKSPACE", filepath.Join(root, "env", ".vscode"), filepath.Join(root, "elsewhere"), filepath.Join(root, "elsewhere")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(tc.dir, "mcp.json")
			testenv.WriteFile(t, path, file)
			lookup := func(k string) (string, bool) {
				if k == WorkspaceEnv && tc.env != "" {
					return tc.env, true
				}
				return "", false
			}
			servers, err := Load(path, Options{Lookup: lookup, Home: "/home/u"})
			if err != nil {
				t.Fatal(err)
			}
			s := servers[0]
			want := []string{tc.want + sep + "srv.js", filepath.Base(tc.want), "/home/u" + sep + "x"}
			if strings.Join(s.Args, "|") != strings.Join(want, "|") || s.Dir != tc.want {
				t.Fatalf("got args %q, dir %q; want %q, %q", s.Args, s.Dir, want, tc.want)
			}
		})
	}
}

// TestVSCodeEntryKeys: the keys VS Code writes (dev, gallery, version) and a
// per-entry enabled load; enabled: false disables the entry.
func TestVSCodeEntryKeys(t *testing.T) {
	t.Parallel()
	servers, err := Parse([]byte(`{"servers": {
		"pw": {"command": "npx", "args": ["@playwright/mcp@latest"], "gallery": "https://api.mcp.github.com", "version": "0.0.1-seed",
			"dev": {"watch": "src/**/*.ts", "debug": {"type": "node"}}, "enabled": true},
		"off": {"command": "x", "enabled": false}}}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range servers {
		got[s.Name] = s.Disabled
	}
	if d, ok := got["pw"]; !ok || d {
		t.Errorf("pw: got disabled=%v present=%v, want enabled", d, ok)
	}
	if !got["off"] {
		t.Errorf("off: got enabled, want disabled")
	}
}
