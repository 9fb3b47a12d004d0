package approvals_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/approvals"
)

func TestSocketModeRelaysLikeWebhooks(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	api := fakes.NewSlack(t)
	interactive := click(approver, approvals.ActionApprove, "task-1", "1700000000.000001")
	mention := map[string]any{
		"token": "x", "team_id": team, "api_app_id": "A0APP01", "type": "event_callback",
		"event_id": "Ev0MENTION1", "event_time": 1700000000,
		"event": map[string]any{"type": "app_mention", "user": "U0ASKER01", "text": "<@U0BOT> help",
			"ts": "1700000100.000100", "channel": "C0CHAT01", "event_ts": "1700000100.000100"},
	}
	command := map[string]any{"token": "x", "team_id": team, "channel_id": "C0CHAT01", "user_id": "U0ASKER01",
		"command": "/relay", "text": "summarize", "trigger_id": "1700000400.1.abc", "response_url": "https://hooks.slack.com/commands/1"}
	ws := fakes.NewSlackSocket(t,
		map[string]any{"envelope_id": "env-interactive", "type": "interactive", "payload": interactive, "accepts_response_payload": false},
		map[string]any{"envelope_id": "env-event", "type": "events_api", "payload": mention, "retry_attempt": 0},
		map[string]any{"envelope_id": "env-command", "type": "slash_commands", "payload": command},
	)
	api.SetSocketURL(ws.URL())

	sm, err := approvals.NewSocketMode(approvals.SocketConfig{
		AppToken: secret.New("xapp-1-test"), BotToken: secret.New("xoxb-test"), APIURL: api.URL(), PingInterval: time.Minute, Logger: testenv.Logger(t, slog.LevelDebug),
	}, b)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(t.Context())
	go func() { done <- sm.Run(runCtx) }()
	testenv.WaitFor(t, 10*time.Second, "three acks", func() bool { return len(ws.Acked()) == 3 })
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	h := &harness{t: t, bus: b}
	tests := []struct {
		subject, msgID, content string
	}{
		{"in.slack.block_actions", "slack:" + team + ":block_actions:" + interactive["trigger_id"].(string), "chose"},
		{"in.slack.app_mention", "slack:" + team + ":Ev0MENTION1", "mentioned the app"},
		{"in.slack.command", "slack:" + team + ":command:1700000400.1.abc", "ran /relay summarize"},
	}
	for _, tt := range tests {
		msgs := h.streamMsgs(tt.subject)
		if len(msgs) != 1 {
			t.Errorf("%s has %d envelopes, want 1", tt.subject, len(msgs))
			continue
		}
		if !strings.Contains(msgs[0].Content, tt.content) {
			t.Errorf("%s content = %q, want it to contain %q", tt.subject, msgs[0].Content, tt.content)
		}
		// The same delivery identity as the webhook: a webhook of the same
		// interaction would be a duplicate.
		if got := msgIDOf(t, h, tt.subject); got != tt.msgID {
			t.Errorf("%s Nats-Msg-Id = %q, want %q", tt.subject, got, tt.msgID)
		}
	}
	if n := len(api.Calls("apps.connections.open")); n < 1 {
		t.Errorf("apps.connections.open not called")
	}
	raw, _ := json.Marshal(ws.Acked())
	for _, id := range []string{"env-interactive", "env-event", "env-command"} {
		if !strings.Contains(string(raw), id) {
			t.Errorf("acks %s lack %s", raw, id)
		}
	}
}

func TestSocketModeRefusesBotToken(t *testing.T) {
	t.Parallel()
	if _, err := approvals.NewSocketMode(approvals.SocketConfig{AppToken: secret.New("xoxb-not-an-app-token")}, nil); err == nil {
		t.Error("NewSocketMode accepted a bot token as app token")
	}
}
