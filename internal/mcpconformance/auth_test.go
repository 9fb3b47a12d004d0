package mcpconformance

import (
	"os/exec"
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
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.Missing(t, "curl (the $BROWSER of the auth scenarios) is not installed")
	}
	runClientScenarios(t, authScenarios, "auth-expected-failures.yml", 90*time.Second)
}
