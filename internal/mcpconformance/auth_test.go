package mcpconformance

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

// authScenarios are the suite's auth client scenarios (0.1.16), the
// 2025-11-25 and 2025-03-26 ones, the draft ones and both client
// credentials extensions.
var authScenarios = []string{
	"auth/metadata-default", "auth/metadata-var1", "auth/metadata-var2", "auth/metadata-var3",
	"auth/basic-cimd", "auth/scope-from-www-authenticate", "auth/scope-from-scopes-supported",
	"auth/scope-omitted-when-undefined", "auth/scope-step-up", "auth/scope-retry-limit",
	"auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post", "auth/token-endpoint-auth-none",
	"auth/pre-registration", "auth/2025-03-26-oauth-metadata-backcompat", "auth/2025-03-26-oauth-endpoint-fallback",
	"auth/resource-mismatch", "auth/offline-access-scope", "auth/offline-access-not-supported",
	"auth/client-credentials-basic", "auth/client-credentials-jwt",
}

// TestAuthClientScenarios runs the suite's auth scenarios against `relay
// mcp call` (AuthClient: $BROWSER is curl following the authorization
// redirect). Scenarios in testdata/conformance/auth-expected-failures.yml
// are expected to fail, each for the reason written there; one that passes
// anyway fails the test.
func TestAuthClientScenarios(t *testing.T) {
	bin := suite(t)
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.Missing(t, "curl (the $BROWSER of the auth scenarios) is not installed")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	expected := filepath.Join(bin, "..", "..", "auth-expected-failures.yml")
	raw := testenv.ReadFile(t, expected)
	for _, scenario := range authScenarios {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			expectFail := strings.Contains(string(raw), "  - "+scenario+"\n")
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "conformance"), "client",
				"--command", exe+" -test.run=^$", "--scenario", scenario, "--timeout", "90000",
				"--expected-failures", expected, "-o", dir)
			cmd.Env = append(os.Environ(), clientEnv+"=1", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			runErr := cmd.Run()
			// The suite writes <dir>/auth/<name>-<time>/checks.json.
			checks := readChecks(t, filepath.Join(dir, "auth"))
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
				t.Logf("expected failure: %q", failed)
			}
		})
	}
}
