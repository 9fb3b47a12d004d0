package console

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
)

// TestHubAddKeepsEnvelopesOnly: an envelope is kept once; a record that is
// not an envelope (an audit line) and a repeat are not.
func TestHubAddKeepsEnvelopesOnly(t *testing.T) {
	h := newHub(nil, 10, time.Minute, time.Now, nil)
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "hello")
	raw, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	h.add("relay.in.github.issues", raw, nil, at)
	h.add("relay.in.github.issues", raw, nil, at)
	h.add("relay.audit.tool", []byte(`{"id":"x","server":"everything","tool":"echo","status":"success"}`), nil, at)
	h.add("relay.in.github.issues", []byte(`not json`), nil, at)
	got := h.filter(10, func(*Event) bool { return true })
	if len(got) != 1 || got[0].Env().ID != e.ID || got[0].Env().Content != "hello" || string(got[0].Raw) != string(raw) {
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
	h.add("relay.in.github.issues", rawDup, nil, at.Add(time.Second))
	if ev := h.byID(dup.ID); ev == nil || ev.Env().Content != "second" {
		t.Fatalf("got %+v, want the envelope with a repeated field kept, its last content", ev)
	}
}

// TestHubAddDecodesOnlyWhenShown: an envelope that carries the bus's headers
// is kept by them, and decoded on first use to the envelope it is; one whose
// body is not the envelope its headers name shows what the headers say.
func TestHubAddDecodesOnlyWhenShown(t *testing.T) {
	h := newHub(nil, 10, time.Minute, time.Now, nil)
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "hello")
	e.Meta.Thread = "github:octo/hello#1"
	e.Meta.Source = &envelope.Source{Event: "issues", DeliveryID: "d-1", Actor: "octocat"}
	raw, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string][]string{}
	envelope.EncodeHeader(e, hdr)
	at := time.Now()
	h.add("in.github.issues", raw, hdr, at)
	h.add("in.github.issues", raw, hdr, at)
	ev := h.byID(e.ID)
	if ev == nil || len(h.filter(10, func(*Event) bool { return true })) != 1 {
		t.Fatalf("want the envelope %s kept once by its headers", e.ID)
	}
	if ev.env != nil {
		t.Fatal("the envelope was decoded before any page asked for it")
	}
	if got := ev.Env(); got.Content != "hello" || got.Meta.Thread != e.Meta.Thread || ev.Actor() != "octocat" || ev.Delivery() != "d-1" {
		t.Fatalf("decoded %+v (actor %q, delivery %q), want the envelope published", got, ev.Actor(), ev.Delivery())
	}
	if n := h.rates(time.Minute)["github"]; n != 1 {
		t.Fatalf("rates counted %d github envelopes, want 1", n)
	}

	forged := map[string][]string{envelope.HeaderID: {"not-the-body"}, envelope.HeaderThread: {"t"}, envelope.HeaderChannel: {"slack"}}
	h.add("in.slack.message", raw, forged, at)
	got := h.byID("not-the-body").Env()
	if got.ID != "not-the-body" || got.Content != "" || got.Meta.Thread != "t" || got.Channel != "slack" {
		t.Fatalf("got %+v, want what the headers say, without content", got)
	}
}

// TestHubAddMeanwhileKeepsPublishOrder: what the subscriptions delivered
// while the hub loaded the streams joins the loaded envelopes in the order
// they were published. Published in the order P, V, U, A, B, Z: P before any
// subscription and U on a root subscribed after V's (both only loaded), V and
// B loaded and delivered, A after the load read its stream and Z after both
// (only delivered). A loaded envelope that was also delivered keeps the time
// the stream stored it; one the load missed goes right after the one
// delivered before it.
func TestHubAddMeanwhileKeepsPublishOrder(t *testing.T) {
	b := bustest.Embedded(t)
	h := newHub(b, 10, time.Minute, time.Now, nil)
	p, pm := envelopeMsg(t, b, "in.github.issues")
	v, vm := envelopeMsg(t, b, "in.github.issues")
	u, um := envelopeMsg(t, b, "agent.step")
	a, am := envelopeMsg(t, b, "in.github.issues")
	bb, bm := envelopeMsg(t, b, "agent.step")
	z, zm := envelopeMsg(t, b, "in.github.issues")
	stored := time.Now().Add(-time.Minute)
	for i, m := range []*nats.Msg{pm, vm, um, bm} {
		h.add(b.Relative(m.Subject), m.Data, m.Header, stored.Add(time.Duration(i)*time.Millisecond))
	}
	h.addMeanwhile([]*nats.Msg{vm, am, bm, zm})
	if got, want := ringIDs(h), []string{p, v, u, a, bb, z}; !slices.Equal(got, want) {
		t.Fatalf("the ring holds %v, want %v", got, want)
	}
}

// TestHubAddMeanwhileTimes: when the load found only envelopes that also
// came, one it missed that came first goes before them; when it found
// nothing, what came is kept at the time it is added, never at a zero time.
func TestHubAddMeanwhileTimes(t *testing.T) {
	b := bustest.Embedded(t)
	h := newHub(b, 10, time.Minute, time.Now, nil)
	a, am := envelopeMsg(t, b, "in.github.issues")
	v, vm := envelopeMsg(t, b, "in.github.issues")
	h.add(b.Relative(vm.Subject), vm.Data, vm.Header, time.Now().Add(-time.Minute))
	h.addMeanwhile([]*nats.Msg{am, vm})
	if got, want := ringIDs(h), []string{a, v}; !slices.Equal(got, want) {
		t.Fatalf("only what also came loaded: the ring holds %v, want %v", got, want)
	}

	h = newHub(b, 10, time.Minute, time.Now, nil)
	before := time.Now()
	z, zm := envelopeMsg(t, b, "in.github.issues")
	h.addMeanwhile([]*nats.Msg{am, zm})
	if got, want := ringIDs(h), []string{a, z}; !slices.Equal(got, want) {
		t.Fatalf("nothing loaded: the ring holds %v, want %v", got, want)
	}
	if at := h.byID(z).Seen; at.Before(before) {
		t.Fatalf("nothing loaded: kept at %s, want the time it was added (after %s)", at, before)
	}
}

// envelopeMsg is a new envelope as the subscription to subject (relative to
// b's prefix) delivers it, headers included, with its id.
func envelopeMsg(t *testing.T, b *bus.Bus, subject string) (string, *nats.Msg) {
	t.Helper()
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "on "+subject)
	raw, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: b.Subject(subject), Data: raw, Header: nats.Header{}}
	envelope.EncodeHeader(e, m.Header)
	return e.ID, m
}
