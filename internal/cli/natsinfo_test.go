package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"

	"github.com/relaystation/relay/config"
)

// TestOperatorCommandsNameTheirServer runs the operator commands against a
// NATS server with a name and a token: each names the server on stderr (URL
// without the token, name, id, version), and stdout of -json stays JSON.
func TestOperatorCommandsNameTheirServer(t *testing.T) {
	t.Parallel()
	const token = "s3cret-nats-token"
	opts := natstest.DefaultTestOptions
	opts.Port = -1
	opts.ServerName = "relay-cli-test"
	opts.Authorization = token
	opts.JetStream = true
	opts.StoreDir = t.TempDir()
	srv := natstest.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	port := strconv.Itoa(srv.Addr().(*net.TCPAddr).Port)
	mcpJSON := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(mcpJSON, []byte(`{"mcpServers": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"NATS_URL":         "nats://" + token + "@127.0.0.1:" + port,
		"RELAY_DATA_DIR":   t.TempDir(),
		"RELAY_MCP_CONFIG": mcpJSON,
	}
	wantStderr := "relay: NATS server nats://REDACTED@127.0.0.1:" + port + " (name " + opts.ServerName +
		", id " + srv.ID() + ", version " + server.VERSION + `, subject prefix "relay")`
	for _, tc := range []struct {
		args []string
		json bool
	}{
		{[]string{"dlq", "list", "-json"}, true},
		{[]string{"dlq", "list"}, false},
		{[]string{"mcp", "list", "-json"}, true},
		{[]string{"mcp", "resume"}, false},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			var out, errb syncBuffer
			if code := Run(t.Context(), tc.args, config.FromMap(env), &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if !strings.Contains(errb.String(), wantStderr) {
				t.Errorf("stderr: got %q, want it to contain %q", errb.String(), wantStderr)
			}
			if strings.Contains(out.String()+errb.String(), token) {
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
