package slack_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
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
		if err != nil {
			var se *mappers.SignatureError
			if !errors.As(err, &se) {
				t.Fatalf("got %T %v, want *mappers.SignatureError", err, err)
			}
		}
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
		files, _ := filepath.Glob(filepath.Join("testdata", route, "*"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
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
		res, err := p.Map(signed(route, body))
		if err != nil {
			var pe *mappers.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("got %T %v, want *mappers.ParseError", err, err)
			}
			return
		}
		if len(res.Items) == 0 && res.Reply == nil {
			t.Fatal("no items and no reply")
		}
		for _, it := range res.Items {
			if !strings.HasPrefix(it.Subject, "in.slack.") || strings.Count(it.Subject, ".") != 2 || it.MsgID == "" {
				t.Fatalf("got subject %q msg id %q", it.Subject, it.MsgID)
			}
			if err := envelope.Validate(it.Envelope); err != nil {
				t.Fatalf("invalid envelope: %v", err)
			}
			if len(it.Envelope.Content) > mappers.MaxContent+len("…") {
				t.Fatalf("content of %d bytes", len(it.Envelope.Content))
			}
		}
	})
}
