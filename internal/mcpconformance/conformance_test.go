package mcpconformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

// The test binary doubles as the client program the suite launches (the
// same code as cmd/relay-conformance-client): with clientEnv set, TestMain
// runs Client on the URL the suite appends to the command line.
const clientEnv = "RELAY_CONFORMANCE_CLIENT"

func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) != "" {
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := Client(ctx, os.Getenv("MCP_CONFORMANCE_SCENARIO"), os.Args[len(os.Args)-1], os.Stdout, log)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// suite returns the directory holding the conformance suite and Node.js 22
// (testdata/conformance/node_modules/.bin), or stops the test.
func suite(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "conformance", "node_modules", ".bin")
	for _, name := range []string{"node", "conformance"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			testenv.Missing(t, "%s not installed in %s; run scripts/setup.sh (npm ci in testdata/conformance)", name, bin)
		}
	}
	out, err := exec.Command(filepath.Join(bin, "node"), "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "v2") || string(out) < "v22" {
		testenv.Missing(t, "Node.js 22 or newer is needed in %s (got %q, %v)", bin, out, err)
	}
	return bin
}

type check struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	ErrorMessage string `json:"errorMessage"`
}

// clientScenarios are the non-auth client scenarios run: those of
// 2025-11-25 and those 2026-07-28 added (the relay negotiates the version
// with each scenario's server as with any other).
var clientScenarios = []string{
	// 2025-11-25
	"initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry",
	// 2026-07-28
	"request-metadata", "sep-2322-client-request-state", "http-standard-headers", "http-custom-headers",
	"http-invalid-tool-headers", "json-schema-ref-no-deref", "json-schema-2020-12-preservation",
}

// TestClientScenarios runs the official suite's client scenarios against the
// relay's MCP client (package tools). Scenarios listed in
// testdata/conformance/baseline.yml are expected to fail; one that passes
// anyway fails the test, so the list cannot go stale.
func TestClientScenarios(t *testing.T) {
	runClientScenarios(t, clientScenarios, "baseline.yml", time.Minute)
}

// runClientScenarios runs each scenario, in parallel subtests, through the
// suite's client runner with this test binary as the client (suiteTimeout
// for each, twice that for the whole run). Scenarios listed in
// testdata/conformance/<expectedFile> are expected to fail; one that
// passes anyway fails the test, so the list cannot go stale.
func runClientScenarios(t *testing.T, scenarios []string, expectedFile string, suiteTimeout time.Duration) {
	t.Helper()
	bin := suite(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	expected := filepath.Join(bin, "..", "..", expectedFile)
	raw := testenv.ReadFile(t, expected)
	for _, scenario := range scenarios {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			expectFail := strings.Contains(string(raw), "  - "+scenario+"\n")
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(t.Context(), 2*suiteTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "conformance"), "client",
				"--command", exe+" -test.run=^$", "--scenario", scenario, "--timeout", strconv.FormatInt(suiteTimeout.Milliseconds(), 10),
				"--expected-failures", expected, "-o", dir)
			cmd.Env = append(os.Environ(), clientEnv+"=1", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			runErr := cmd.Run()
			// The suite writes <dir>/<name>-<time>/checks.json, an auth
			// scenario <dir>/auth/<name>-<time>/checks.json.
			checks := readChecks(t, filepath.Join(dir, path.Dir(scenario)))
			var failed []string
			for _, c := range checks {
				if c.Status == "FAILURE" || c.Status == "WARNING" {
					failed = append(failed, c.ID+": "+c.ErrorMessage)
				}
			}
			switch {
			case len(checks) == 0:
				t.Fatalf("no checks recorded (%v); suite output:\n%s", runErr, out.String())
			case runErr != nil:
				t.Fatalf("suite exit: %v; failed checks %q; output:\n%s", runErr, failed, out.String())
			case expectFail && len(failed) == 0:
				t.Fatalf("scenario passes but is listed in %s; remove it", expected)
			case !expectFail && len(failed) > 0:
				t.Fatalf("failed checks: %q", failed)
			case expectFail:
				t.Logf("expected failure (%s): %q", expectedFile, failed)
			}
		})
	}
}

// readChecks reads the checks.json of the one result directory under dir.
func readChecks(t *testing.T, dir string) []check {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*", "checks.json"))
	var out []check
	for _, f := range files {
		b := testenv.ReadFile(t, f)
		var cs []check
		if err := json.Unmarshal(b, &cs); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, cs...)
	}
	return out
}

func TestArgs(t *testing.T) {
	t.Parallel()
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"a":    map[string]any{"type": "number"},
			"b":    map[string]any{"type": "integer"},
			"mode": map[string]any{"type": "string", "enum": []any{"fast", "slow"}},
			"who":  map[string]any{"type": "string", "default": "me"},
			"name": map[string]any{"type": "string"},
			"opt":  map[string]any{"type": "string"},
		},
		"required": []any{"a", "b", "mode", "who", "name"},
	}
	got, _ := json.Marshal(Args(schema))
	want := `{"a":2,"b":3,"mode":"fast","name":"Name","who":"me"}`
	if string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
