package cli

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/tools"
)

// TestEverySecretSettingIsRedacted reads every secret setting the binary
// knows (config.SecretSettings, filled by reading every service's settings),
// sets a canary in each and a password in every URL setting, and finds none
// of them in what the tool runner's redactor (tool results, the audit, the
// stores and the bus carry its output) and the log handler let through.
func TestEverySecretSettingIsRedacted(t *testing.T) {
	// Not parallel: it reads the process's known secrets.
	var stderr syncBuffer
	Run(t.Context(), []string{"dlq", "list"}, config.FromMap(map[string]string{"NATS_URL": "nats://127.0.0.1:1"}), &syncBuffer{}, &stderr)
	names := config.SecretSettings()
	for _, want := range []string{"EMBEDDINGS_API_KEY", "RELAY_NATS_TOKEN", "RELAY_WEBHOOK_SECRET", "RELAY_CONSOLE_TOKEN", "SLACK_BOT_TOKEN", "GITHUB_TOKEN"} {
		if !slices.Contains(names, want) {
			t.Errorf("the registry lacks %s (have %v)", want, names)
		}
	}
	env := map[string]string{
		"NATS_URL":     "nats://relay:natspw-canary-0193@127.0.0.1:1",
		"REDIS_URL":    "redis://:redispw-canary-0193@127.0.0.1:1/0",
		"DATABASE_URL": "postgres://relay:dbpw-canary-0193@127.0.0.1:1/relay?sslmode=disable",
	}
	canaries := []string{"natspw-canary-0193", "redispw-canary-0193", "dbpw-canary-0193"}
	for _, n := range names {
		v := "canary-" + strings.ToLower(n) + "-7f3a9c"
		env[n] = v
		canaries = append(canaries, v)
	}
	stderr = syncBuffer{}
	Run(t.Context(), []string{"dlq", "list"}, config.FromMap(env), &syncBuffer{}, &stderr)

	text := "result: " + strings.Join(canaries, " and ") + " whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	got, changed := tools.NewRedactor().String(text)
	if !changed {
		t.Errorf("nothing redacted in %q", text)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{ReplaceAttr: redactAttr}))
	for _, c := range canaries {
		log.Info("call", "result", "the value is "+c, "err", errors.New("failed with "+c))
	}
	for _, c := range canaries {
		if strings.Contains(got, c) {
			t.Errorf("tool result leaks %s: %q", c, got)
		}
		if strings.Contains(logs.String(), c) {
			t.Errorf("log leaks %s", c)
		}
		if strings.Contains(stderr.String(), c) {
			t.Errorf("relay's stderr leaks %s", c)
		}
	}
	if strings.Contains(got, "whsec_") {
		t.Errorf("whsec_ secret not redacted: %q", got)
	}
}
