package cli

import (
	"bytes"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/testenv"
)

// serviceSettings names, per registered service, a setting the service owns
// and a value its settings reader refuses.
var serviceSettings = map[string][2]string{
	"agent":      {"RELAY_AGENT_MAX_STEPS", "0"},
	"approvals":  {"SLACK_APPROVAL_CHANNEL", "general"},
	"ingest":     {"RELAY_INGEST_MAX_BODY_GITHUB", "1"},
	"memory":     {"EMBEDDINGS_MODEL", "nomic-embed-text"},
	"outbound":   {"RELAY_OUTBOUND_CONCURRENCY", "0"},
	"toolrunner": {"RELAY_MCP_CONFIG", "/nonexistent/mcp.json"},
	"hooks":      {"RELAY_HOOKS", "/nonexistent/hooks.yaml"},
	"console":    {"RELAY_CONSOLE_ADDR", "no-port"},
}

// TestServicesReadTheirSettings checks the registry in-process: every
// service's settings stop `relay <service>` and `relay serve` before
// anything connects, naming the variable; an operator command knows them all.
func TestServicesReadTheirSettings(t *testing.T) {
	t.Parallel()
	if got, want := slices.Sorted(maps.Keys(services)), slices.Sorted(maps.Keys(serviceSettings)); !slices.Equal(got, want) {
		t.Fatalf("registered services %v, want %v (add the new service to serviceSettings)", got, want)
	}
	for name, kv := range serviceSettings {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// An unreachable NATS server: the run must stop on the setting first.
			env := map[string]string{"NATS_URL": "nats://127.0.0.1:1", kv[0]: kv[1]}
			for _, args := range [][]string{{name}, {"serve"}} {
				var stderr syncBuffer
				code := Run(t.Context(), args, config.FromMap(env), &syncBuffer{}, &stderr)
				if code == 0 || !strings.Contains(stderr.String(), kv[0]+":") || strings.Contains(stderr.String(), "connect to nats") {
					t.Errorf("relay %s with %s=%s: exit %d, stderr %q; want a failure naming %s before connecting",
						args[0], kv[0], kv[1], code, stderr.String(), kv[0])
				}
			}
			var stderr syncBuffer
			Run(t.Context(), []string{"dlq", "list"}, config.FromMap(env), &syncBuffer{}, &stderr)
			if strings.Contains(stderr.String(), "unknown") {
				t.Errorf("relay dlq list with %s set: %q, want the setting known", kv[0], stderr.String())
			}
		})
	}
}

// TestMainStaysThin keeps package main a call into this package: commands and
// services are wired here, where they can be imported and tested.
func TestMainStaysThin(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../cmd/relay/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in cmd/relay (%v)", err)
	}
	lines := 0
	for _, f := range files {
		b := testenv.ReadFile(t, f)
		lines += bytes.Count(b, []byte("\n"))
	}
	if lines >= 400 {
		t.Errorf("package main has %d lines, want under 400: wire new commands in internal/cli", lines)
	}
}

// TestHelpAndStrayArguments: asking any command for help prints its usage on
// stdout and exits 0 without starting or connecting anything; a service or
// serve given arguments it does not take exits 2 instead of starting and
// ignoring them.
func TestHelpAndStrayArguments(t *testing.T) {
	t.Parallel()
	// An unreachable NATS server: whatever tried to connect would fail.
	env := map[string]string{"NATS_URL": "nats://127.0.0.1:1", "RELAY_NATS_LISTEN": "127.0.0.1:1"}
	cmds := [][]string{{"serve"}, {"mcp"}, {"memory"}, {"dlq"}, {"bench"}}
	for name := range services {
		cmds = append(cmds, []string{name})
	}
	for _, cmd := range cmds {
		for _, h := range []string{"-h", "--help", "help"} {
			t.Run(strings.Join(cmd, "_")+h, func(t *testing.T) {
				t.Parallel()
				var out, errb syncBuffer
				code := Run(t.Context(), append(slices.Clone(cmd), h), config.FromMap(env), &out, &errb)
				if code != 0 || !strings.Contains(out.String(), "usage") || errb.String() != "" {
					t.Errorf("relay %s %s: exit %d, stdout %q, stderr %q; want 0, usage on stdout, nothing on stderr", cmd[0], h, code, out.String(), errb.String())
				}
			})
		}
	}
	for _, name := range []string{"serve", "ingest", "toolrunner", "agent"} {
		var out, errb syncBuffer
		code := Run(t.Context(), []string{name, "extra"}, config.FromMap(env), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "takes no arguments") {
			t.Errorf("relay %s extra: exit %d, stderr %q; want 2 and why", name, code, errb.String())
		}
	}
}
