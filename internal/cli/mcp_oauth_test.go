package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaystation/relay/tools/oauthtest"
)

// TestMCPLoginCallLogout: the standalone CLI against a real OAuth-protected
// server: without a key the call says which login to run; `relay mcp
// login` with $BROWSER following the redirect stores the tokens (0600, in
// the data dir); `relay mcp call` uses them without a new login; `relay
// mcp logout` revokes them; a denied consent is a clear error.
func TestMCPLoginCallLogout(t *testing.T) {
	t.Parallel()
	srv := oauthtest.Start(t, oauthtest.Options{Scopes: []string{"read"}})
	env := embeddedEnv(t)
	env["RELAY_MCP_CONFIG"] = writeTemp(t, "mcp.json", fmt.Sprintf(`{"servers": {"hosted": {"url": %q}}}`, srv.MCP))
	env["BROWSER"] = "curl -sfL -o /dev/null"
	cli := cliRunner(t, env)

	code, _, errs := cli("mcp", "call", "hosted", "whoami")
	if code != 1 || !strings.Contains(errs, "needs_login") || !strings.Contains(errs, "relay mcp login hosted") {
		t.Fatalf("call before login: exit %d, stderr %q; want 1 naming `relay mcp login hosted`", code, errs)
	}
	code, _, errs = cli("mcp", "login", "hosted")
	if code != 1 || !strings.Contains(errs, "RELAY_SECRET_KEY") {
		t.Fatalf("login without a key: exit %d, stderr %q; want 1 naming RELAY_SECRET_KEY", code, errs)
	}

	env["RELAY_SECRET_KEY"] = "cli-test-secret-key-0123456789abcdef"
	code, out, errs := cli("mcp", "login", "hosted")
	if code != 0 || !strings.Contains(out, "logged in to hosted") {
		t.Fatalf("login: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	files, _ := filepath.Glob(filepath.Join(env["RELAY_DATA_DIR"], "oauth", "t.*"))
	if len(files) != 1 {
		t.Fatalf("got token files %v, want 1", files)
	}
	if st, _ := os.Stat(files[0]); st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", st.Mode().Perm())
	}

	code, out, errs = cli("mcp", "call", "hosted", "whoami")
	if code != 0 || !strings.Contains(out, "user:alice") || srv.Logins.Load() != 1 {
		t.Fatalf("call after login: exit %d, stdout %q, stderr %q, %d logins; want user:alice and 1 login", code, out, errs, srv.Logins.Load())
	}
	if strings.Contains(out+errs, "at-") || strings.Contains(out+errs, "rt-") {
		t.Errorf("a token is in the output: %q %q", out, errs)
	}

	code, out, errs = cli("mcp", "logout", "hosted")
	if code != 0 || !strings.Contains(out, "revoked and deleted") || srv.Revoked.Load() == 0 {
		t.Fatalf("logout: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	denied := oauthtest.Start(t, oauthtest.Options{Deny: true})
	env["RELAY_MCP_CONFIG"] = writeTemp(t, "mcp.json", fmt.Sprintf(`{"servers": {"hosted": {"url": %q}}}`, denied.MCP))
	code, _, errs = cli("mcp", "login", "hosted")
	if code != 1 || !strings.Contains(errs, "authorization denied: access_denied") {
		t.Errorf("denied login: exit %d, stderr %q; want 1 saying the authorization was denied", code, errs)
	}
}
