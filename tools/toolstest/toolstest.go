// Package toolstest starts tool runners for the tests of the packages that
// call tools through one: a runner built from a tools.Config, started on the
// test's context, closed when the test ends. Policy parses a test's policy;
// EverythingBundle is a bundle for the tests that install one.
package toolstest

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// ReadyWithin is how long Ready waits for a runner's servers: starting a
// server over stdio can take seconds on a loaded machine.
const ReadyWithin = 30 * time.Second

// Start builds a runner from cfg and starts it on the test's context; the
// runner is closed when the test ends. Its servers may still be connecting:
// Ready waits for them.
func Start(tb testing.TB, cfg tools.Config) *tools.Runner {
	tb.Helper()
	r, err := tools.New(cfg)
	if err != nil {
		tb.Fatalf("tools.New: %v", err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	if err := r.Start(tb.Context()); err != nil {
		tb.Fatalf("start the tool runner: %v", err)
	}
	return r
}

// Ready waits until every enabled server of r is ready, and fails the test
// naming those that are not after ReadyWithin.
func Ready(tb testing.TB, r *tools.Runner) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), ReadyWithin)
	defer cancel()
	if pending := r.WaitReady(ctx); len(pending) > 0 {
		tb.Fatalf("tool servers not ready after %s: %v (%+v)", ReadyWithin, pending, r.Servers())
	}
}

// StartReady is Start, then Ready.
func StartReady(tb testing.TB, cfg tools.Config) *tools.Runner {
	tb.Helper()
	r := Start(tb, cfg)
	Ready(tb, r)
	return r
}

// Policy parses yml, a tool policy (roles, budgets, bindings); a policy that
// does not parse stops the test.
func Policy(tb testing.TB, yml string) *mcpconfig.Policy {
	tb.Helper()
	p, err := mcpconfig.ParsePolicy([]byte(yml))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// EverythingModule is server-everything's entry point inside the npm
// fixtures' node_modules (testenv.NPMModules).
const EverythingModule = "@modelcontextprotocol/server-everything/dist/index.js"

// EverythingBundle is a relay bundle directory "ref" (a bundle.yaml, id ref)
// whose server "everything" runs server-everything with node through
// ${bundlePath}: its node_modules links to the npm fixtures'. The test stops
// when they or node are missing.
func EverythingBundle(tb testing.TB) string {
	tb.Helper()
	mods := testenv.NPMModules(tb, "server-everything", EverythingModule)
	dir := filepath.Join(tb.TempDir(), "ref")
	testenv.WriteFile(tb, filepath.Join(dir, "bundle.yaml"), "id: ref\nversion: '1'\nmcpServers:\n  everything:\n    command: node\n"+
		"    args: ['${bundlePath}/node_modules/"+EverythingModule+"', stdio]\n")
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// AuditRecords reads the JSONL audit log at path; a log not written yet
// has no records.
func AuditRecords(tb testing.TB, path string) []tools.Record {
	tb.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []tools.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r tools.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			tb.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}
