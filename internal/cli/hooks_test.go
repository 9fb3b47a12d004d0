package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/hooks"
)

// TestHooksValidateRefusesInvalidFile: exit 1, one line per problem naming
// hook, action and field; the same file stops `relay hooks` at startup.
func TestHooksValidateRefusesInvalidFile(t *testing.T) {
	t.Parallel()
	bad := writeTemp(t, "hooks.yaml", `
hooks:
  - name: slow
    on: [github.issues.opened]
    actions:
      - type: mcp
        parameters:
          serverId: everything
          toolName: echo
          timeout: 999999
          parameterMappings:
            - {toolParam: message, source: literal, value: a}
            - {toolParam: message, source: literal, value: b}
`)
	env := map[string]string{"RELAY_HOOKS": bad, "NATS_URL": "nats://127.0.0.1:1", "RELAY_MCP_CONFIG": filepath.Join(t.TempDir(), "none.json")}
	cli := cliRunner(t, env)
	code, out, _ := cli("hooks", "validate", "--offline")
	if code != 1 || !strings.Contains(out, `hook "slow": action 1: parameters.timeout:`) {
		t.Errorf("validate: exit %d, stdout %q; want 1 naming the timeout", code, out)
	}
	env["RELAY_HOOKS"] = writeTemp(t, "good.yaml", "hooks:\n  - name: ok\n    on: [github.issues.opened]\n    actions:\n      - type: mcp\n        parameters: {serverId: everything, toolName: echo}\n")
	if code, out, errOut := cli("hooks", "validate", "--offline"); code != 1 || !strings.Contains(out, `server "everything" is not in mcp.json`) {
		t.Errorf("validate with no such server: exit %d, stdout %q, stderr %q; want 1 naming the server", code, out, errOut)
	}
	env["RELAY_HOOKS"] = bad
	if code, _, errOut := cli("hooks"); code == 0 || !strings.Contains(errOut, "RELAY_HOOKS:") || !strings.Contains(errOut, "parameters.parameterMappings[1].toolParam") {
		t.Errorf("relay hooks: exit %d, stderr %q; want a startup failure naming RELAY_HOOKS and the problems", code, errOut)
	}
}

// TestHooksInServe: `relay serve` runs the hooks worker: a signed GitHub
// webhook fires a hook whose tool call goes through the tool runner; the
// record is readable with `relay hooks log`, the outcome with `relay hooks
// list`, and `relay hooks test --run` runs the hook on a golden envelope.
func TestHooksInServe(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(env map[string]string) {
		dir := filepath.Dir(env["RELAY_POLICY"])
		must(t, os.WriteFile(env["RELAY_POLICY"], []byte("roles:\n  - role: agent\n    capabilities: [\"everything.*\"]\n  - role: hooks\n    capabilities: [\"everything.echo\"]\n"), 0o600))
		file := filepath.Join(dir, "hooks.yaml")
		must(t, os.WriteFile(file, []byte(`
hooks:
  - name: echo-issues
    on: [github.issues.opened]
    actions:
      - type: mcp
        parameters:
          serverId: everything
          toolName: echo
          parameterMappings:
            - {toolParam: message, source: template, value: "hook saw {{.repository}}#{{.number}}"}
`), 0o600))
		env["RELAY_HOOKS"] = file
	})
	cli := cliRunner(t, s.env)
	js, err := jetstream.New(s.nc)
	must(t, err)
	testenv.WaitFor(t, 10*time.Second, "the hooks consumer", func() bool {
		_, err := js.Consumer(t.Context(), "RELAY_IN", "hooks")
		return err == nil
	})
	s.issueOpened(77, "hooks")
	var recs []hooks.Execution
	testenv.WaitFor(t, 30*time.Second, "relay hooks log shows the execution", func() bool {
		code, out, _ := cli("hooks", "log", "-json", "--hook", "echo-issues")
		recs = nil
		return code == 0 && json.Unmarshal([]byte(out), &recs) == nil && len(recs) == 1
	})
	if x := recs[0]; x.Status != hooks.StatusSuccess || !strings.Contains(x.Result, "hook saw Codertocat/Hello-World#77") {
		t.Errorf("record: got %+v, want success echoing the issue", x)
	}
	if code, out, _ := cli("hooks", "list"); code != 0 || !strings.Contains(out, "echo-issues") || !strings.Contains(out, "success (action 1") {
		t.Errorf("hooks list: exit %d\n%s", code, out)
	}
	golden := filepath.Join("..", "..", "mappers", "github", "testdata", "golden", "issues.opened.json")
	code, out, errOut := cli("hooks", "test", "echo-issues", "--envelope", golden, "--run")
	if code != 0 || !strings.Contains(out, "matches: true") || !strings.Contains(out, `"message":"hook saw Codertocat/Hello-World#1"`) || !strings.Contains(out, "ran: success") {
		t.Errorf("hooks test --run: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}

// TestHooksCLIRefusesUnknownSetting: `relay hooks validate` checks the
// environment as every other command does, so a misspelt RELAY_HOOKS is
// named instead of the default file being validated in its place.
func TestHooksCLIRefusesUnknownSetting(t *testing.T) {
	t.Parallel()
	env := map[string]string{"RELAY_HOKS": writeTemp(t, "hooks.yaml", "hooks: []\n"), "NATS_URL": "nats://127.0.0.1:1",
		"RELAY_MCP_CONFIG": filepath.Join(t.TempDir(), "none.json")}
	code, out, errOut := cliRunner(t, env)("hooks", "validate", "--offline")
	if code == 0 || !strings.Contains(errOut, "RELAY_HOKS: unknown setting") {
		t.Errorf("hooks validate: exit %d, stdout %q, stderr %q; want a failure naming RELAY_HOKS", code, out, errOut)
	}
}
