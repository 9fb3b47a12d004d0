package github_test

import (
	"bytes"
	"fmt"
	"net/http"
	"time"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/secret"
)

// A gateway verifies a webhook on its raw bytes, then maps it to the
// envelope it publishes on the bus, with the Nats-Msg-Id that makes GitHub's
// redelivery of the same delivery a duplicate.
func Example() {
	p := github.New(github.Config{Secret: secret.New("webhook-secret")})
	body := []byte(`{"action":"opened","issue":{"number":7,"title":"Typo in README","body":"It says teh.","html_url":"https://github.com/octo/hello/issues/7"},` +
		`"repository":{"full_name":"octo/hello","html_url":"https://github.com/octo/hello"},"sender":{"login":"alice","type":"User"}}`)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	github.SetHeaders(h, "issues", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "123", github.Sign([]byte("webhook-secret"), body))
	r := &mappers.Request{Header: h, Body: body, Received: time.Now()}

	if err := p.Verify(r); err != nil {
		fmt.Println(err)
		return
	}
	res, err := p.Map(r)
	if err != nil {
		fmt.Println(err)
		return
	}
	it := res.Items[0]
	fmt.Println(it.Subject)
	fmt.Println(it.MsgID)
	fmt.Println(it.Envelope.Role, it.Envelope.Meta.Thread, it.Envelope.Meta.Source.URL)
	fmt.Println(it.Envelope.Content)

	// A body changed after signing does not verify.
	r.Body = bytes.Replace(body, []byte("teh"), []byte("the"), 1)
	fmt.Println(p.Verify(r))
	// Output:
	// in.github.issues
	// github:123:72d3162e-cc78-11e3-81ab-4c9367dc0958
	// user github:octo/hello#7 https://github.com/octo/hello/issues/7
	// alice opened issue #7 in octo/hello: Typo in README
	//
	// It says teh.
	// github signature: X-Hub-Signature-256 does not match the body
}
