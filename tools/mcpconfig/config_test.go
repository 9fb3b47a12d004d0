package mcpconfig

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseLayouts(t *testing.T) {
	t.Parallel()
	env := lookup(map[string]string{"TOKEN": "s3cret", "GITHUB_TOKEN": "ghp_x"})
	tests := []struct {
		name string
		doc  string
		want []Server
	}{
		{
			name: "vscode servers with inferred types",
			doc: `{"servers": {
				"fs": {"command": "npx", "args": ["-y", "${dataDir}/x"], "env": {"A": "${env:TOKEN}", "N": 3}},
				"remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${input:github-token}"}}
			}, "inputs": [{"id": "github-token", "type": "promptString"}]}`,
			want: []Server{
				{Name: "fs", Type: Stdio, Command: "npx", Args: []string{"-y", "/data/x"}, Env: map[string]string{"A": "s3cret", "N": "3"}},
				{Name: "remote", Type: HTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer ghp_x"}},
			},
		},
		{
			name: "claude mcpServers with sse and protocol version",
			doc:  `{"mcpServers": {"b": {"type": "sse", "url": "http://127.0.0.1:1/sse"}, "a": {"type": "stdio", "command": "x", "protocolVersion": "2026-07-28"}}}`,
			want: []Server{
				{Name: "b", Type: SSE, URL: "http://127.0.0.1:1/sse"},
				{Name: "a", Type: Stdio, Command: "x", ProtocolVersion: "2026-07-28"},
			},
		},
		{
			name: "duplicates disabled, first stays",
			doc:  `{"servers": {"one": {"command": "x", "args": ["a","b"]}, "two": {"command": "x", "args": ["a","b"]}, "three": {"command": "x", "args": ["a"]}}}`,
			want: []Server{
				{Name: "one", Type: Stdio, Command: "x", Args: []string{"a", "b"}},
				{Name: "two", Type: Stdio, Command: "x", Args: []string{"a", "b"}, Disabled: true, Description: "Duplicate of one"},
				{Name: "three", Type: Stdio, Command: "x", Args: []string{"a"}},
			},
		},
		{
			name: "empty",
			doc:  `{}`,
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse([]byte(tt.doc), Options{Lookup: env, DataDir: "/data"})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d servers, want %d: %+v", len(got), len(tt.want), got)
			}
			for i := range got {
				if g, w := describe(got[i]), describe(tt.want[i]); g != w {
					t.Errorf("server %d:\ngot  %s\nwant %s", i, g, w)
				}
			}
		})
	}
}

func describe(s Server) string {
	var b strings.Builder
	b.WriteString(string(s.Type) + "|" + s.Name + "|" + s.Command + "|" + strings.Join(s.Args, ",") + "|" + s.URL + "|" + s.ProtocolVersion + "|" + s.Description)
	for _, m := range []map[string]string{s.Env, s.Headers} {
		b.WriteString("|")
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		for _, k := range sortStrings(keys) {
			b.WriteString(k + "=" + m[k] + ";")
		}
	}
	if s.Disabled {
		b.WriteString("|disabled")
	}
	return b.String()
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func TestParseErrorsNameServerAndField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"empty name", `{"servers": {"": {"command": "x"}}}`, []string{"line 1, column 14", "name is empty"}},
		{"stdio without command", `{"servers": {"a": {"type": "stdio"}}}`, []string{`server "a"`, "command: required"}},
		{"nothing", `{"servers": {"a": {}}}`, []string{`server "a"`, "command: required"}},
		{"remote without url", `{"servers": {"a": {"type": "http"}}}`, []string{`server "a"`, "url: required"}},
		{"bad url", `{"servers": {"a": {"type": "sse", "url": "ftp://x"}}}`, []string{`server "a"`, "url: not a valid"}},
		{"named pipe", `{"servers": {"a": {"url": "pipe:///mcp"}}}`, []string{`server "a"`, "url: Windows named pipes are not supported on this platform"}},
		{"long name", `{"servers": {"` + strings.Repeat("n", 101) + `": {"command": "x"}}}`, []string{"at most 100"}},
		{"bad timeout", `{"servers": {"a": {"command": "x", "timeout": "soon"}}}`, []string{`server "a"`, "timeout"}},
		{"bad schemaVersion", `{"servers": {"a": {"command": "x", "schemaVersion": "v1"}}}`, []string{"schemaVersion"}},
		{"ttlMs too short", `{"servers": {"a": {"command": "x", "ttlMs": 10}}}`, []string{`server "a"`, "ttlMs: 10 is outside 1000..86400000"}},
		{"ttlMs not a number", `{"servers": {"a": {"command": "x", "ttlMs": "1m"}}}`, []string{`server "a"`, "ttlMs"}},
		{"no servers", `{"globalShortcut": "x"}`, []string{"mcpServers"}},
		{"unknown type", `{"servers": {"a": {"type": "websocket", "url": "http://x"}}}`, []string{`server "a"`, `type: unknown type "websocket"`}},
		{"missing env var", `{"servers": {"a": {"command": "x", "env": {"K": "${env:NOPE_NOT_SET}"}}}}`, []string{`server "a"`, "env.K", "NOPE_NOT_SET"}},
		{"missing input", `{"servers": {"a": {"url": "http://h/${input:api-key}"}}}`, []string{`server "a"`, "API_KEY"}},
		{"unknown variable", `{"servers": {"a": {"command": "${workspaceRoot}/x"}}}`, []string{`server "a"`, "unknown variable"}},
		{"unknown field", `{"servers": {"a": {"command": "x", "comand": "y"}}}`, []string{`server "a"`, "comand: unknown field"}},
		{"repeated name", `{"servers": {"a": {"command": "x"}, "a": {"command": "y"}}}`, []string{`server "a"`, `defined twice in "servers"`}},
		{"both layouts", `{"servers": {"a": {"command": "x"}}, "mcpServers": {"a": {"command": "y"}}}`, []string{`server "a"`, "both"}},
		{"not json", "{\n  \"servers\": {\n    \"a\": {\"command\": \"x\"}}} x", []string{"line 3", "not valid JSON or JSONC"}},
		{"bad version", `{"servers": {"a": {"command": "x", "protocolVersion": "latest"}}}`, []string{"protocolVersion"}},
		{"args wrong type", `{"servers": {"a": {"command": "x", "args": "y"}}}`, []string{`server "a"`, "args"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.doc), Options{Lookup: lookup(nil)})
			if err == nil {
				t.Fatal("got nil error, want one")
			}
			if _, ok := errors.AsType[*ValidationError](err); !ok {
				t.Errorf("got %T, want a *ValidationError", err)
			}
			testenv.ErrorNames(t, err, tt.want...)
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "mcp.json"), Options{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing file: got %v, want ErrNotFound", err)
	}
	testenv.WriteFile(t, filepath.Join(dir, "srv.env"), "# c\nexport A=1\nB=\"two words\"\n\nC='x=y'\n")
	path := filepath.Join(dir, "mcp.json")
	testenv.WriteFile(t, path, `{"servers": {"a": {"command": "x", "envFile": "srv.env", "env": {"A": "over"}}}}`)
	got, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "over", "B": "two words", "C": "x=y"}
	for k, v := range want {
		if got[0].Env[k] != v {
			t.Errorf("env %s: got %q, want %q", k, got[0].Env[k], v)
		}
	}
	testenv.WriteFile(t, path, `{"servers": {"a": {"type": "http"}}}`)
	_, err = Load(path, Options{})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("got %v, want an error naming %s", err, path)
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	yml := `
roles:
  - role: triage
    capabilities: ["github.read", "jira.*"]
  - role: admin
    capabilities: ["*.*"]
budgets:
  github: {rps: 2.5, concurrency: 3, timeout: 10s, daily_quota: 100}
  github.read: {timeout: 2s}
limits: {concurrency: 7, stop: true}
`
	p, err := ParsePolicy([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	allowed := []struct {
		role, server, tool string
		want               bool
	}{
		{"triage", "github", "read", true},
		{"triage", "gitlab", "read", false},
		{"triage", "jira", "anything", true},
		{"admin", "x", "y", true},
		{"", "github", "read", false},
		{"nobody", "github", "read", false},
	}
	for _, a := range allowed {
		if got := p.Allowed(a.role, a.server, a.tool); got != a.want {
			t.Errorf("Allowed(%q, %s.%s) = %v, want %v", a.role, a.server, a.tool, got, a.want)
		}
	}
	if got := p.Timeout("github", "read"); got != 2*time.Second {
		t.Errorf("tool timeout: got %s, want 2s", got)
	}
	if got := p.Timeout("github", "write"); got != 10*time.Second {
		t.Errorf("server timeout: got %s, want 10s", got)
	}
	if got := p.Timeout("other", "x"); got != DefaultTimeout {
		t.Errorf("default timeout: got %s, want %s", got, DefaultTimeout)
	}
	if b := p.Budget("github"); b.Burst != 3 || b.RPS != 2.5 || b.DailyQuota != 100 || b.Concurrency != 3 {
		t.Errorf("budget: got %+v", b)
	}
	if p.Limits.Concurrency != 7 || !p.Limits.Stop {
		t.Errorf("limits: got %+v", p.Limits)
	}
}

func TestPolicyErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, doc, want string }{
		{"bad capability", `{"roles": [{"role": "r", "capabilities": ["github"]}]}`, "capabilities"},
		{"timeout too long", `{"budgets": {"a": {"timeout": "10m"}}}`, "budgets.a.timeout"},
		{"timeout too short", `{"budgets": {"a": {"timeout": "500ms"}}}`, "budgets.a.timeout"},
		{"unknown key", `{"rolez": []}`, "rolez"},
		{"duplicate role", `{"roles": [{"role": "r", "capabilities": ["a.*"]}, {"role": "r", "capabilities": ["a.*"]}]}`, "defined twice"},
		{"empty capabilities", `{"roles": [{"role": "r", "capabilities": []}]}`, "roles/0/capabilities"},
		{"binding two places", `{"bindings": [{"slack": {"team": "T0A"}, "github": {"org": "o"}, "servers": ["a"]}]}`, "want exactly one"},
		{"binding without place", `{"bindings": [{"servers": ["a"]}]}`, "bindings"},
		{"binding bad channel", `{"bindings": [{"slack": {"channel": "ops"}, "servers": ["a"]}]}`, "channel"},
		{"binding bad repo", `{"bindings": [{"github": {"repo": "api"}, "servers": ["a"]}]}`, "repo"},
		{"binding twice", `{"bindings": [{"github": {"org": "o"}, "servers": ["a"]}, {"github": {"org": "o"}, "servers": ["b"]}]}`, "again"},
		{"repo bound twice in another case", `{"bindings": [{"github": {"repo": "o/r"}, "servers": ["a"]}, {"github": {"repo": "O/R"}, "servers": ["b"]}]}`, "again"},
		{"binding no servers", `{"bindings": [{"github": {"org": "o"}, "servers": []}]}`, "servers"},
		{"bad member", `{"roles": [{"role": "r", "capabilities": ["a.*"], "members": {"slack": ["#ops"]}}]}`, "members"},
		{"burst without rps", `{"budgets": {"a": {"burst": 3}}}`, "needs rps"},
		{"not yaml", "roles: [", "not YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParsePolicy([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestCapability(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"github.read", "jira.*", "*.*", "filesystem.read_text_file", "a.b.c"} {
		if _, err := ParseCapability(s); err != nil {
			t.Errorf("ParseCapability(%q): %v", s, err)
		}
	}
	for _, s := range []string{"github", "*.read", "github.", ".x", "a.b*", "a b.c"} {
		if _, err := ParseCapability(s); err == nil {
			t.Errorf("ParseCapability(%q): got nil error", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"servers": {"a": {"command": "x", "args": ["${env:HOME}"]}}}`))
	f.Add([]byte(`{"mcpServers": {"b": {"url": "http://x/${input:k}", "headers": {"h": "${dataDir}"}}}}`))
	f.Add([]byte(`{"servers": {"a": {"type": "sse"}}, "inputs": []}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		servers, err := Parse(data, Options{Lookup: lookup(map[string]string{"HOME": "/h", "K": "v"})})
		if err != nil {
			return
		}
		for _, s := range servers {
			if !nameRE.MatchString(s.Name) {
				t.Fatalf("accepted bad name %q", s.Name)
			}
			if s.Type == Stdio && s.Command == "" || s.Type != Stdio && s.URL == "" {
				t.Fatalf("accepted incomplete server %+v", s)
			}
		}
	})
}

func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte("roles:\n  - role: a\n    capabilities: ['x.*']\nbudgets:\n  x: {rps: 1, timeout: 5s}\n"))
	f.Add([]byte(`{"limits": {"concurrency": 3, "stop": true}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicy(data)
		if err != nil {
			return
		}
		for k, b := range p.Budgets {
			if b.Timeout != 0 && (b.Timeout < MinTimeout || b.Timeout > MaxTimeout) {
				t.Fatalf("budget %s: accepted timeout %s", k, b.Timeout)
			}
		}
		if p.Limits.Concurrency < 1 {
			t.Fatalf("accepted concurrency %d", p.Limits.Concurrency)
		}
	})
}

func FuzzParseEnvFile(f *testing.F) {
	f.Add([]byte("A=1\n# c\nexport B='2'\n"))
	f.Add([]byte("=x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		vars, err := ParseEnvFile(data)
		if err != nil {
			return
		}
		for k := range vars {
			if !envNameRE.MatchString(k) {
				t.Fatalf("accepted bad name %q", k)
			}
		}
	})
}

// TestServerToolsTTL: an entry's ttlMs is how long its tool list is cached.
func TestServerToolsTTL(t *testing.T) {
	t.Parallel()
	servers, err := Parse([]byte(`{"servers": {"a": {"command": "x", "ttlMs": 90000}, "b": {"command": "y"}}}`), Options{Lookup: lookup(nil)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Duration{}
	for _, s := range servers {
		got[s.Name] = s.ToolsTTL
	}
	if got["a"] != 90*time.Second || got["b"] != 0 {
		t.Errorf("ToolsTTL: got %v, want a 1m30s and b 0 (the default)", got)
	}
}
