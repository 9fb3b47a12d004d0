package ingest_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/ingest"
)

// A credential someone pasted into an issue (its body and its title) is
// replaced before the envelope is stored: it reaches neither the bus nor the
// log, which says how many were replaced. The prose around it, and a word
// like "token" in it, stay as written.
func TestCredentialsInWebhookTextAreReplaced(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	var logs testenv.Buffer
	gw := startGateway(t, b, ingest.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, githubProvider())
	pat := "ghp_" + strings.Repeat("A1b2", 9)
	aws := "AKIAIOSFODNN7EXAMPLE"
	body := readFixture(t, "mappers", "github", "testdata", "payloads", "issues.opened.json")
	body = withField(t, body, "CI fails: the token "+pat+" expired, key "+aws, "issue", "body")
	body = withField(t, body, "Leaked "+pat, "issue", "title")
	if code, answer := do(t, githubRequest(t, gw.url, "issues", "leak-1", body)); code != http.StatusOK {
		t.Fatalf("got %d %q, want 200", code, answer)
	}
	got := collect(t, b, 1, 10*time.Second)["leak-1"]
	if len(got) != 1 {
		t.Fatalf("got %d envelopes for the delivery, want 1", len(got))
	}
	stored := string(got[0].Data)
	for _, c := range []string{pat, aws} {
		if strings.Contains(stored, c) {
			t.Errorf("the stored envelope holds %q: %s", c, stored)
		}
		if strings.Contains(logs.String(), c) {
			t.Errorf("the log holds %q", c)
		}
	}
	e := got[0].Envelope
	if want := "CI fails: the token [REDACTED] expired, key [REDACTED]"; !strings.Contains(e.Content, want) {
		t.Errorf("content %q, want it to hold %q", e.Content, want)
	}
	facts, _ := e.Meta.Extra["facts"].(map[string]any)
	if facts["title"] != "Leaked [REDACTED]" {
		t.Errorf("title fact %v, want %q", facts["title"], "Leaked [REDACTED]")
	}
	if !strings.Contains(logs.String(), `"credentials":4`) {
		t.Errorf("the log does not count the 4 credentials replaced (title twice: fact and content): %s", logs.String())
	}
}
