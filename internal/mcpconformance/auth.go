package mcpconformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/cli"
)

// ClientMetadataURL is the Client ID Metadata Document URL the auth
// scenarios expect (the go-sdk's conformance client uses the same).
const ClientMetadataURL = "https://conformance-test.local/client-metadata.json"

// AuthClient is the adapter of the suite's auth/* client scenarios: it
// drives the relay's own command, `relay mcp call conformance test-tool`,
// on an mcp.json naming url (with the pre-registered or client credentials
// client of the scenario's MCP_CONFORMANCE_CONTEXT), a fresh data dir and
// no bus, and $BROWSER set to curl following the authorization redirect to
// the command's loopback listener. The call logs in as a person would.
func AuthClient(ctx context.Context, scenario, url, scenarioContext string, out, errw io.Writer) error {
	dir, err := os.MkdirTemp("", "relay-conformance-auth-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var sc map[string]any
	if scenarioContext != "" {
		_ = json.Unmarshal([]byte(scenarioContext), &sc)
	}
	entry := map[string]any{"url": url}
	oauth := map[string]any{}
	if id, _ := sc["client_id"].(string); id != "" {
		oauth["clientId"] = id
		if sec, _ := sc["client_secret"].(string); sec != "" {
			oauth["clientSecret"] = sec
		}
	}
	if strings.Contains(scenario, "client-credentials") {
		oauth["grant"] = "client_credentials"
		if pem, _ := sc["private_key_pem"].(string); pem != "" {
			key := filepath.Join(dir, "key.pem")
			if err := os.WriteFile(key, []byte(pem), 0o600); err != nil {
				return err
			}
			oauth["privateKeyFile"] = key
			oauth["tokenEndpointAuth"] = "private_key_jwt"
		}
	}
	if len(oauth) > 0 {
		entry["oauth"] = oauth
	}
	cfg, _ := json.Marshal(map[string]any{"servers": map[string]any{"conformance": entry}})
	mcpJSON := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(mcpJSON, cfg, 0o600); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a NATS address nobody serves: standalone
	if err != nil {
		return err
	}
	natsAddr := ln.Addr().String()
	ln.Close()
	env := map[string]string{
		"PATH":                            os.Getenv("PATH"),
		"HOME":                            os.Getenv("HOME"),
		"RELAY_MCP_CONFIG":                mcpJSON,
		"RELAY_DATA_DIR":                  dir,
		"RELAY_NATS_LISTEN":               natsAddr,
		"RELAY_SECRET_KEY":                "conformance-secret-key-0123456789abcdef",
		"RELAY_OAUTH_CLIENT_METADATA_URL": ClientMetadataURL,
		"BROWSER":                         "curl -sfL -o /dev/null",
	}
	if code := cli.Run(ctx, []string{"mcp", "call", "conformance", "test-tool"}, config.FromMap(env), out, errw); code != 0 {
		return fmt.Errorf("relay mcp call exited %d", code)
	}
	return nil
}
