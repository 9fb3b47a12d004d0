package outbound

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
)

// loseFirstPost lets Slack accept the first chat.postMessage and then loses
// its answer, as a connection reset after the request was sent would.
type loseFirstPost struct{ lost atomic.Bool }

func (l *loseFirstPost) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && strings.HasSuffix(r.URL.Path, "/chat.postMessage") && l.lost.CompareAndSwap(false, true) {
		resp.Body.Close()
		return nil, errors.New("connection reset by peer")
	}
	return resp, err
}

// TestSlackPostWithLostReplyNotRepeated: a Slack post whose answer was lost
// may have been made; the retry looks for it in the thread instead of
// posting it again.
func TestSlackPostWithLostReplyNotRepeated(t *testing.T) {
	t.Parallel()
	h := start(t)
	lose := &loseFirstPost{}
	sp, err := slack.NewPoster(slack.PosterConfig{Token: secret.New("xoxb-t"), APIURL: h.apis.URL("slack"),
		HTTPClient: &http.Client{Transport: lose}})
	if err != nil {
		t.Fatal(err)
	}
	h.svc.slack = sp
	target := &envelope.Target{Channel: "slack", SlackCh: "C9", ThreadTS: "1700000000.000009"}
	e := answer(target, "Posted once although the first answer was lost.")
	h.run()
	h.publish(e, "out.slack")
	rec := h.waitDone("out:" + e.ID)
	if !lose.lost.Load() {
		t.Fatal("no answer was lost; the test tests nothing")
	}
	if got := len(h.apis.slackPosts()); got != 1 || len(rec.Parts) != 1 {
		t.Fatalf("got %d messages and parts %v, want the one message, found after the lost answer", got, rec.Parts)
	}
}
