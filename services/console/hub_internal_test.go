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
	// An envelope envelope.ParseFast leaves alone (a repeated field) is
	// still decoded, by encoding/json, as before.
	dup := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "first")
	rawDup, err := dup.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rawDup = append(rawDup[:len(rawDup)-1], `,"content":"second"}`...)
	if _, ok := envelope.ParseFast(rawDup); ok {
		t.Fatalf("ParseFast took %s, want it to leave a repeated field to the reference", rawDup)
	}
	h.add("relay.in.github.issues", rawDup, at.Add(time.Second))
	if ev := h.byID(dup.ID); ev == nil || ev.Env.Content != "second" {
		t.Fatalf("got %+v, want the envelope with a repeated field kept, its last content", ev)
	}
}
