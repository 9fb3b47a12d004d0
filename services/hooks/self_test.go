package hooks_test

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
)

const slackEchoFile = `
hooks:
  - name: echo-slack-messages
    on: ["slack.message"]
    actions:
      - {type: mcp, parameters: {serverId: everything, toolName: echo, parameterMappings: [{toolParam: message, source: context, value: content}]}}
`

// slackItem maps a Slack Events API payload through the Slack mapper, as the
// gateway does.
func slackItem(t *testing.T, body []byte) mappers.Item {
	t.Helper()
	const key = "8f742231b10e8888abcd99yyyzzz85a5"
	ts := strconv.FormatInt(mapperstest.Received.Unix(), 10)
	h := http.Header{}
	h.Set(slack.HeaderTimestamp, ts)
	h.Set(slack.HeaderSignature, slack.SignatureHeader(key, ts, body))
	p := slack.New(slack.Config{Secret: secret.New(key), Now: func() time.Time { return mapperstest.Received }})
	return mapperstest.MapOne(t, p, &mappers.Request{Route: slack.RouteEvents, Header: h, Body: body, Received: mapperstest.Received})
}

// TestNoHookOnOwnSlackPost: the relay's own Slack posts (posted by the app
// the event is for) never fire hooks, which would otherwise answer their
// own replies for ever; another app's bot message fires them like any.
func TestNoHookOnOwnSlackPost(t *testing.T) {
	t.Parallel()
	r := start(t, slackEchoFile)
	own := mapperstest.ReadFile(t, filepath.Join("..", "..", "mappers", "slack", "testdata", "events", "message_from_app.json"))
	r.publish(t, slackItem(t, own))
	other := bytes.ReplaceAll(own, []byte(`"app_id": "A123ABC456"`), []byte(`"app_id": "A0OTHERAPP"`))
	other = bytes.ReplaceAll(other, []byte("Ev06ABCDE13"), []byte("Ev06ABCDE99"))
	it := slackItem(t, other)
	r.publish(t, it)
	x := record(t, r.executed)
	if x.EnvelopeID != it.Envelope.ID {
		t.Errorf("hook ran for envelope %s, want only the other app's message %s", x.EnvelopeID, it.Envelope.ID)
	}
	testenv.Quiet(t, r.executed, 500*time.Millisecond, "a hook execution for the relay's own post")
}
