package tools

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// A stdio server that exits during the handshake is reported with the
// cause and its last stderr lines (bounded, redacted), not a bare EOF.
func TestHandshakeFailureShowsServerStderr(t *testing.T) {
	t.Parallel()
	var script strings.Builder
	for i := range 15 {
		fmt.Fprintf(&script, "echo 'starting step %d' >&2; ", i)
	}
	script.WriteString("echo 'Error: WEATHER_API_KEY is not set (got canary-secret-value-123)' >&2; exit 1")
	s := mcpconfig.Server{Name: "dies", Type: mcpconfig.Stdio, Command: "sh", Args: []string{"-c", script.String()},
		ProtocolVersion: mcpconfig.DefaultProtocolVersion}
	cfg := Config{BaseEnv: BaseEnvFrom(os.Environ()), Redactor: NewRedactor().With("canary-secret-value-123")}
	p := ProbeServer(t.Context(), cfg, s)
	if p.Status != ProbeUnhealthy {
		t.Fatalf("status %s, want unhealthy", p.Status)
	}
	for _, want := range []string{"the server exited or closed its stdout during the handshake", "server stderr (last lines):", "Error: WEATHER_API_KEY is not set", "starting step 14"} {
		if !strings.Contains(p.Error, want) {
			t.Errorf("error %q lacks %q", p.Error, want)
		}
	}
	if strings.Contains(p.Error, "starting step 5\n") || strings.Count(p.Error, "\n") > stderrTailLines {
		t.Errorf("error %q: want at most the last %d stderr lines", p.Error, stderrTailLines)
	}
	if strings.Contains(p.Error, "canary-secret-value-123") {
		t.Errorf("error %q shows a secret", p.Error)
	}
}
