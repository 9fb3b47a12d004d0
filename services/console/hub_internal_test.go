package console

import (
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
)

// TestHubAddKeepsEnvelopesOnly: an envelope is kept once; a record that is
// not an envelope (an audit line) and a repeat are not.
func TestHubAddKeepsEnvelopesOnly(t *testing.T) {
	h := newHub(nil, 10, time.Now)
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "hello")
	raw, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	h.add("relay.in.github.issues", raw, at)
	h.add("relay.in.github.issues", raw, at)
	h.add("relay.audit.tool", []byte(`{"id":"x","server":"everything","tool":"echo","status":"success"}`), at)
	h.add("relay.in.github.issues", []byte(`not json`), at)
	got := h.filter(10, func(*Event) bool { return true })
	if len(got) != 1 || got[0].Env.ID != e.ID || got[0].Env.Content != "hello" || string(got[0].Raw) != string(raw) {
		t.Fatalf("got %d events (%+v), want the one envelope %s", len(got), got, e.ID)
	}
}
