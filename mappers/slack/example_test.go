package slack_test

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
)

// A gateway verifies a request, then maps it: url_verification answers the
// challenge and publishes nothing; a message becomes one envelope.
func Example() {
	p := slack.New(slack.Config{Secret: secret.New("signing-secret")})
	now := time.Now()
	send := func(body string) *mappers.Request {
		ts := strconv.FormatInt(now.Unix(), 10)
		h := http.Header{}
		h.Set(slack.HeaderTimestamp, ts)
		h.Set(slack.HeaderSignature, slack.SignatureHeader("signing-secret", ts, []byte(body)))
		return &mappers.Request{Route: slack.RouteEvents, Header: h, Body: []byte(body), Received: now}
	}

	r := send(`{"type":"url_verification","challenge":"abc123"}`)
	if err := p.Verify(r); err != nil {
		fmt.Println(err)
		return
	}
	res, _ := p.Map(r)
	fmt.Println(len(res.Items), string(res.Reply.Body))

	r = send(`{"type":"event_callback","team_id":"T1","event_id":"Ev1","event":{"type":"message","user":"U1","channel":"C1","text":"hello","ts":"1700000000.000100"}}`)
	if err := p.Verify(r); err != nil {
		fmt.Println(err)
		return
	}
	res, _ = p.Map(r)
	it := res.Items[0]
	fmt.Println(it.Subject, it.MsgID, it.Envelope.Meta.Thread)
	fmt.Println(it.Envelope.Content)
	// Output:
	// 0 abc123
	// in.slack.message slack:T1:Ev1 slack:T1/C1/1700000000.000100
	// <@U1> wrote in <#C1>: hello
}
