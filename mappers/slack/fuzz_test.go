package slack_test

import (
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/slack"
)

// FuzzVerify: no input panics; a request signed with the secret is accepted
// and the same request with any other signature is refused.
func FuzzVerify(f *testing.F) {
	ts := strconv.FormatInt(received.Unix(), 10)
	f.Add([]byte(`{"type":"event_callback"}`), ts, "v0=00")
	f.Add([]byte(""), "", "")
	f.Add([]byte("payload=%7B%7D"), "-1", "v0=")
	f.Add([]byte("x"), "99999999999999999999", "v0="+strings.Repeat("ab", 32))
	p := newProvider()
	f.Fuzz(func(t *testing.T, body []byte, ts, sig string) {
		h := http.Header{}
		h.Set(slack.HeaderTimestamp, ts)
		h.Set(slack.HeaderSignature, sig)
		r := &mappers.Request{Route: "events", Header: h, Body: body, Received: received}
		err := p.Verify(r)
		good := slack.SignatureHeader(testSecret, ts, body)
		if err == nil && sig != good {
			t.Fatalf("accepted signature %q for body %q, want only %q", sig, body, good)
		}
		mapperstest.CheckSignatureError(t, err)
		h.Set(slack.HeaderSignature, good)
		err = p.Verify(r)
		n, perr := strconv.ParseInt(ts, 10, 64)
		inWindow := perr == nil && n >= received.Unix()-300 && n <= received.Unix()+300
		if inWindow && err != nil {
			t.Fatalf("refused a correctly signed request at ts %q: %v", ts, err)
		}
		if !inWindow && err == nil {
			t.Fatalf("accepted timestamp %q outside the window", ts)
		}
	})
}

// FuzzMap: no input panics; every result is either a *mappers.ParseError or
// items whose envelopes are schema-valid, with subjects under in.slack.
func FuzzMap(f *testing.F) {
	for _, route := range []string{slack.RouteEvents, slack.RouteCommands, slack.RouteInteractions} {
		for _, pl := range mapperstest.Payloads(f, filepath.Join("testdata", route, "*")) {
			b := pl.Body
			if route == slack.RouteInteractions {
				b = []byte("payload=" + string(b))
			}
			f.Add(route, b)
		}
	}
	f.Add("events", []byte(`{"type":"event_callback","event":{"type":"message","subtype":"message_changed","message":null}}`))
	f.Add("interactions", []byte(`payload={"type":"view_submission","view":{"id":"V1","private_metadata":"{\"thread\":\"x\"}","state":{"values":{"b":{"a":{}}}}}}`))
	p := newProvider()
	f.Fuzz(func(t *testing.T, route string, body []byte) {
		res, ok := mapperstest.FuzzMap(t, p, signed(route, body), envelope.ChannelSlack)
		if !ok {
			return
		}
		if len(res.Items) == 0 && res.Reply == nil {
			t.Fatal("no items and no reply")
		}
		for _, it := range res.Items {
			if len(it.Envelope.Content) > mappers.MaxContent+len("…") {
				t.Fatalf("content of %d bytes", len(it.Envelope.Content))
			}
		}
	})
}
