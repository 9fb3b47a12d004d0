package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
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

// TestMCPLoginKilledLeavesNothing: `relay mcp login` SIGKILLed while it
// waits for the browser, and again while its token request is at the
// authorization server, stores nothing (no grant, no stray file); the server
// stays needs_login and the next login works, with a $BROWSER command that
// returns at once as a desktop browser's does.
func TestMCPLoginKilledLeavesNothing(t *testing.T) {
	t.Parallel()
	var gated atomic.Bool
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	srv := oauthtest.Start(t, oauthtest.Options{Scopes: []string{"read"}, TokenGate: func() {
		if gated.Load() {
			arrived <- struct{}{}
			<-release
		}
	}})
	env := embeddedEnv(t)
	env["RELAY_MCP_CONFIG"] = writeTemp(t, "mcp.json", fmt.Sprintf(`{"servers": {"hosted": {"url": %q}}}`, srv.MCP))
	env["RELAY_SECRET_KEY"] = "cli-test-secret-key-0123456789abcdef"
	dir := filepath.Join(env["RELAY_DATA_DIR"], "oauth")
	nothingStored := func(when string) {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		if len(files) != 0 {
			t.Errorf("%s: the data dir holds %v, want nothing", when, files)
		}
	}

	// login starts `relay mcp login hosted --no-browser` and returns the
	// process and the authorization URL it printed.
	login := func() (*exec.Cmd, string) {
		cmd := exec.Command(relayBinary(t), "mcp", "login", "hosted", "--no-browser")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + env["RELAY_DATA_DIR"]}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		urls := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if u := strings.TrimSpace(sc.Text()); strings.HasPrefix(u, srv.AS) {
					urls <- u
				}
			}
		}()
		return cmd, testenv.Receive(t, urls, 60*time.Second, "the authorization URL")
	}
	kill := func(cmd *exec.Cmd) {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}

	cmd, _ := login()
	kill(cmd)
	nothingStored("killed while waiting for the browser")

	gated.Store(true)
	cmd, u := login()
	go func() { _ = oauthtest.FollowRedirect(context.WithoutCancel(t.Context()), u) }() // ends when the login dies
	testenv.Receive(t, arrived, 30*time.Second, "the token request")
	kill(cmd)
	close(release)
	nothingStored("killed during the token request")

	cli := cliRunner(t, env)
	if code, out, errs := cli("mcp", "list"); code != 0 || !strings.Contains(out, "needs_login") {
		t.Errorf("mcp list after the kills: exit %d, stdout %q, stderr %q; want needs_login", code, out, errs)
	}
	gated.Store(false)
	// A desktop browser's command returns at once; the login waits on for
	// the redirect.
	detached := filepath.Join(t.TempDir(), "browser")
	testenv.WriteFile(t, detached, "#!/bin/sh\n(sleep 1; curl -sfL -o /dev/null \"$1\") >/dev/null 2>&1 &\nexit 0\n")
	if err := os.Chmod(detached, 0o755); err != nil {
		t.Fatal(err)
	}
	env["BROWSER"] = detached
	if code, out, errs := cli("mcp", "login", "hosted"); code != 0 || !strings.Contains(out, "logged in to hosted") {
		t.Fatalf("login after the kills: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := cli("mcp", "call", "hosted", "whoami"); code != 0 || !strings.Contains(out, "user:alice") {
		t.Errorf("call after the login: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
