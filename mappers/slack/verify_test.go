package slack_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	slackapi "github.com/slack-go/slack"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"event_callback","team_id":"T1","event_id":"Ev1","event":{"type":"message","text":"hi"}}`)
	ts := strconv.FormatInt(received.Unix(), 10)
	good := slack.SignatureHeader(testSecret, ts, body)
	at := func(d time.Duration) string { return strconv.FormatInt(received.Add(d).Unix(), 10) }
	tests := []struct {
		name    string
		secret  string
		sig, ts string
		body    []byte
		clock   bool  // leave Received zero so the provider's clock is used
		want    error // nil, mappers.ErrNoSecret, or mapperstest.ErrSignature
	}{
		{name: "valid", secret: testSecret, sig: good, ts: ts, body: body},
		{name: "valid, receive time from the clock", secret: testSecret, sig: good, ts: ts, body: body, clock: true},
		{name: "4m59s old", secret: testSecret, sig: slack.SignatureHeader(testSecret, at(-299*time.Second), body), ts: at(-299 * time.Second), body: body},
		{name: "no secret", secret: "", sig: good, ts: ts, body: body, want: mappers.ErrNoSecret},
		{name: "missing signature", secret: testSecret, ts: ts, body: body, want: mapperstest.ErrSignature},
		{name: "missing timestamp", secret: testSecret, sig: good, body: body, want: mapperstest.ErrSignature},
		{name: "wrong secret", secret: "other", sig: good, ts: ts, body: body, want: mapperstest.ErrSignature},
		{name: "tampered body", secret: testSecret, sig: good, ts: ts, body: append([]byte(" "), body...), want: mapperstest.ErrSignature},
		{name: "timestamp swapped", secret: testSecret, sig: good, ts: at(time.Second), body: body, want: mapperstest.ErrSignature},
		{name: "stale 6 minutes", secret: testSecret, sig: slack.SignatureHeader(testSecret, at(-6*time.Minute), body), ts: at(-6 * time.Minute), body: body, want: mapperstest.ErrSignature},
		{name: "future 6 minutes", secret: testSecret, sig: slack.SignatureHeader(testSecret, at(6*time.Minute), body), ts: at(6 * time.Minute), body: body, want: mapperstest.ErrSignature},
		{name: "huge timestamp", secret: testSecret, sig: slack.SignatureHeader(testSecret, "9223372036854775807", body), ts: "9223372036854775807", body: body, want: mapperstest.ErrSignature},
		{name: "negative timestamp", secret: testSecret, sig: slack.SignatureHeader(testSecret, "-9223372036854775808", body), ts: "-9223372036854775808", body: body, want: mapperstest.ErrSignature},
		{name: "timestamp not a number", secret: testSecret, sig: slack.SignatureHeader(testSecret, "soon", body), ts: "soon", body: body, want: mapperstest.ErrSignature},
		{name: "v1 prefix", secret: testSecret, sig: "v1=" + good[3:], ts: ts, body: body, want: mapperstest.ErrSignature},
		{name: "not hex", secret: testSecret, sig: "v0=zz", ts: ts, body: body, want: mapperstest.ErrSignature},
		{name: "short digest", secret: testSecret, sig: good[:20], ts: ts, body: body, want: mapperstest.ErrSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := slack.New(slack.Config{Secret: secret.New(tt.secret), Now: func() time.Time { return received }})
			h := http.Header{}
			if tt.sig != "" {
				h.Set(slack.HeaderSignature, tt.sig)
			}
			if tt.ts != "" {
				h.Set(slack.HeaderTimestamp, tt.ts)
			}
			rcv := received
			if tt.clock {
				rcv = time.Time{}
			}
			err := p.Verify(&mappers.Request{Route: "events", Header: h, Body: tt.body, Received: rcv})
			mapperstest.CheckVerifyErr(t, "slack", err, tt.want)
		})
	}
}

// TestAgreesWithSlackGo checks the verifier against slack-go's own
// SecretsVerifier, which measures the window on the wall clock.
func TestAgreesWithSlackGo(t *testing.T) {
	t.Parallel()
	now := time.Now()
	body := []byte("token=x&team_id=T1&command=%2Frelay&text=hello")
	ts := strconv.FormatInt(now.Unix(), 10)
	for _, tt := range []struct {
		name string
		sig  string
		ok   bool
	}{
		{"valid", slack.SignatureHeader(testSecret, ts, body), true},
		{"other secret", slack.SignatureHeader("other", ts, body), false},
	} {
		h := http.Header{}
		h.Set(slack.HeaderTimestamp, ts)
		h.Set(slack.HeaderSignature, tt.sig)
		sv, err := slackapi.NewSecretsVerifier(h, testSecret)
		if err != nil {
			t.Fatalf("%s: NewSecretsVerifier: %v", tt.name, err)
		}
		if _, err := sv.Write(body); err != nil {
			t.Fatal(err)
		}
		theirs := sv.Ensure() == nil
		ours := slack.New(slack.Config{Secret: secret.New(testSecret)}).
			Verify(&mappers.Request{Header: h, Body: body, Received: now}) == nil
		if theirs != tt.ok || ours != tt.ok {
			t.Errorf("%s: got slack-go %v, ours %v, want %v", tt.name, theirs, ours, tt.ok)
		}
	}
}
