package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/testenv"
)

// TestOperatorCommandsNameTheirServer runs the operator commands against a
// NATS server with a name and a token: each names the server on stderr (URL
// without the token, name, id, version), and stdout of -json stays JSON.
func TestOperatorCommandsNameTheirServer(t *testing.T) {
	t.Parallel()
	env, wantStderr := tokenServer(t)
	for _, tc := range []struct {
		args []string
		json bool
	}{
		{[]string{"dlq", "list", "-json"}, true},
		{[]string{"dlq", "list"}, false},
		{[]string{"mcp", "list", "-json"}, true},
		{[]string{"mcp", "resume"}, false},
		{[]string{"services", "-json", "-wait", "100ms"}, true},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			var out, errb syncBuffer
			if code := Run(t.Context(), tc.args, config.FromMap(env), &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if !strings.Contains(errb.String(), wantStderr) {
				t.Errorf("stderr: got %q, want it to contain %q", errb.String(), wantStderr)
			}
			if strings.Contains(out.String()+errb.String(), natsToken) {
				t.Errorf("the NATS token reached the output:\n%s\n%s", out.String(), errb.String())
			}
			if strings.Contains(out.String(), "NATS server") {
				t.Errorf("stdout names the server; want it on stderr only:\n%s", out.String())
			}
			if tc.json {
				dec := json.NewDecoder(bytes.NewReader([]byte(out.String())))
				for {
					var v any
					if err := dec.Decode(&v); err == io.EOF {
						break
					} else if err != nil {
						t.Fatalf("stdout of -json is not JSON: %v\n%s", err, out.String())
					}
				}
			}
		})
	}
}

// TestOperatorCommandNoServer: with no server at NATS_URL an operator command
// fails at once, naming the URL it tried without its credentials.
func TestOperatorCommandNoServer(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t) // nothing listens there
	env := map[string]string{"NATS_URL": "nats://s3cret-nats-token@" + addr}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out, errb syncBuffer
	code := Run(ctx, []string{"dlq", "list", "-json"}, config.FromMap(env), &out, &errb)
	if code != 1 || ctx.Err() != nil {
		t.Fatalf("exit %d (ctx %v), stderr %q; want exit 1 before the deadline", code, ctx.Err(), errb.String())
	}
	if want := "nats://REDACTED@" + addr; !strings.Contains(errb.String(), want) || strings.Contains(errb.String(), "s3cret") {
		t.Errorf("stderr %q, want it to name %s without the token", errb.String(), want)
	}
	if out.String() != "" {
		t.Errorf("stdout %q, want nothing", out.String())
	}
}

const natsToken = "s3cret-nats-token"

// tokenServer starts a NATS server with JetStream, a server name and a token;
// it returns the environment of a relay using it and the line an operator
// command must print on stderr.
func tokenServer(t *testing.T) (env map[string]string, wantStderr string) {
	t.Helper()
	opts := natstest.DefaultTestOptions
	opts.Port = -1
	opts.ServerName = "relay-cli-test"
	opts.Authorization = natsToken
	opts.JetStream = true
	opts.StoreDir = t.TempDir()
	srv := natstest.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	port := strconv.Itoa(srv.Addr().(*net.TCPAddr).Port)
	mcpJSON := writeTemp(t, "mcp.json", `{"mcpServers": {}}`)
	env = map[string]string{
		"NATS_URL":           "nats://" + natsToken + "@127.0.0.1:" + port,
		"RELAY_DATA_DIR":     t.TempDir(),
		"RELAY_MCP_CONFIG":   mcpJSON,
		"RELAY_HTTP_ADDR":    freeAddr(t),
		"RELAY_CONSOLE_ADDR": freeAddr(t),
	}
	return env, "relay: NATS server nats://REDACTED@127.0.0.1:" + port + " (name " + opts.ServerName +
		", id " + srv.ID() + ", version " + server.VERSION + `, subject prefix "relay")`
}

// TestMemoryCommandsNameTheirServer runs the memory worker in-process on a
// token-protected server and its operator commands against it: each names
// the server on stderr; recall --json prints JSON lines only.
func TestMemoryCommandsNameTheirServer(t *testing.T) {
	t.Parallel()
	env, wantStderr := tokenServer(t)
	var workerLog syncBuffer
	stop := runRelay(t, env, []string{"memory"}, &workerLog)
	defer func() {
		if code := stop(); code != 0 {
			t.Errorf("memory worker: exit %d\n%s", code, workerLog.String())
		}
	}()
	cli := cliRunner(t, env)
	const thread = "github:acme/widgets#7"
	var code int
	var out, errOut string
	testenv.WaitFor(t, 20*time.Second, "the memory worker to answer remember", func() bool {
		code, out, errOut = cli("memory", "remember", "--thread", thread, "the flux capacitor needs 1.21 gigawatts")
		return code == 0
	})
	if !strings.Contains(out, "remembered") || !strings.Contains(errOut, wantStderr) {
		t.Errorf("remember: stdout %q, stderr %q; want %q on stderr", out, errOut, wantStderr)
	}
	code, out, errOut = cli("memory", "recall", "flux capacitor gigawatts", "--thread", thread, "--json")
	if code != 0 || !strings.Contains(errOut, wantStderr) || strings.Contains(out, "NATS server") {
		t.Fatalf("recall: exit %d, stdout %q, stderr %q; want %q on stderr only", code, out, errOut, wantStderr)
	}
	var ref struct{ Text, Thread string }
	if err := json.Unmarshal([]byte(strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])), &ref); err != nil ||
		!strings.Contains(ref.Text, "gigawatts") {
		t.Errorf("recall --json: got %q (%v), want JSON lines with the memory", out, err)
	}
	if code, out, errOut = cli("memory", "forget", "--thread", thread); code != 0 || !strings.Contains(errOut, wantStderr) {
		t.Errorf("forget: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if strings.Contains(workerLog.String(), natsToken) {
		t.Errorf("the NATS token reached the worker's log:\n%s", workerLog.String())
	}
}
