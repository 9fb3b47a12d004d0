package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
)

// Event is one envelope the console saw pass on the bus.
type Event struct {
	// N numbers events in the order the console saw them.
	N int64
	// Subject is relative to the bus prefix.
	Subject string
	// Seen is when the console saw it (or its timestamp, when loaded).
	Seen time.Time
	// Raw is the envelope's JSON.
	Raw json.RawMessage

	// h is what the message's headers say of the envelope (bus.Publish
	// writes them from the envelope it validated); h.ID is always set.
	h    envelope.HeaderFields
	once sync.Once
	env  *envelope.Envelope
}

// Env is the envelope, decoded from Raw on first use: most envelopes pass
// the console without a page ever showing them. If Raw does not decode
// (its headers said it was an envelope, but another producer wrote them),
// Env is the envelope the headers describe, without content.
func (e *Event) Env() *envelope.Envelope {
	e.once.Do(func() {
		if e.env != nil {
			return
		}
		if env, ok := decode(e.Raw); ok && env.ID == e.h.ID {
			e.env = env
			return
		}
		e.env = &envelope.Envelope{ID: e.h.ID, Channel: e.h.Channel, Role: e.h.Role,
			Meta: envelope.Meta{Thread: e.h.Thread, TaskID: e.h.TaskID, MCPVersion: e.h.Version}}
	})
	return e.env
}

// Actor is meta.source.actor, or "".
func (e *Event) Actor() string {
	if s := e.Env().Meta.Source; s != nil {
		return s.Actor
	}
	return ""
}

// Delivery is meta.source.delivery_id, or "".
func (e *Event) Delivery() string { return e.h.Delivery }

// decode decodes and checks an envelope: envelope.ParseFast decodes the
// usual envelope in one pass to the value encoding/json would give; anything
// it leaves goes through encoding/json. ok is false for a record that is not
// an envelope.
func decode(data []byte) (*envelope.Envelope, bool) {
	e, ok := envelope.ParseFast(data)
	if !ok && json.Unmarshal(data, &e) != nil || envelope.Check(e) != nil {
		return nil, false
	}
	return e, true
}

// headerOf is what bus.Publish would write in the headers of e.
func headerOf(e *envelope.Envelope) envelope.HeaderFields {
	h := make(map[string][]string, 8)
	envelope.EncodeHeader(e, h)
	return envelope.DecodeHeader(h)
}

// hub follows the bus: it keeps the last envelopes in a ring and wakes the
// live pages when one arrives. Safe for concurrent use.
type hub struct {
	bus  *bus.Bus
	size int
	now  func() time.Time

	mu      sync.Mutex
	events  []*Event // oldest first, at most size
	ids     map[string]bool
	n       int64
	changed chan struct{} // closed and replaced on every change
}

func newHub(b *bus.Bus, size int, now func() time.Time) *hub {
	return &hub{bus: b, size: size, now: now, ids: map[string]bool{}, changed: make(chan struct{})}
}

// start subscribes to the subjects of the IN and WORK streams and loads
// their last envelopes; stop unsubscribes. It never subscribes to rpc.*: a
// subscriber there would hide "no responders" from every requester.
func (h *hub) start(ctx context.Context) (stop func(), err error) {
	var subs []*nats.Subscription
	stop = func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, root := range append([]string{"in"}, bus.WorkRoots()...) {
		subj := h.bus.Subject(root + ".>")
		sub, err := h.bus.Conn().Subscribe(subj, func(m *nats.Msg) {
			h.add(h.bus.Relative(m.Subject), m.Data, m.Header, h.now())
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("console: subscribe to %s: %w", subj, err)
		}
		subs = append(subs, sub)
	}
	for _, rel := range []string{"in.x", "agent.x"} { // the IN and WORK streams
		if err := h.load(ctx, h.bus.StreamName(rel)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// load adds the last envelopes of a stream, in stream order.
func (h *hub) load(ctx context.Context, stream string) error {
	st, err := h.bus.JetStream().Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("console: load %s: %w", stream, err)
	}
	last := st.CachedInfo().State.LastSeq
	if last == 0 {
		return nil
	}
	from := uint64(1)
	if last > uint64(h.size) {
		from = last - uint64(h.size) + 1
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
	if err != nil {
		return fmt.Errorf("console: load %s: %w", stream, err)
	}
	for left := last - from + 1; left > 0; {
		batch, err := c.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("console: load %s: %w", stream, err)
		}
		got := uint64(0)
		for m := range batch.Messages() {
			got++
			md, _ := m.Metadata()
			at := h.now()
			if md != nil {
				at = md.Timestamp
			}
			h.add(h.bus.Relative(m.Subject()), m.Data(), m.Headers(), at)
		}
		if got == 0 {
			break
		}
		left -= min(got, left)
	}
	return nil
}

// add records an envelope (anything else, and repeats, are ignored).
//
// An envelope published by bus.Publish, which validated it against the
// schema, carries its id, thread, task, channel, role and delivery in
// headers: the console keeps those and its JSON, and decodes it only when a
// page shows it (Event.Env). Decoding every message cost the whole relay a
// twentieth of its CPU, most of it for envelopes no page ever showed. A
// message without those headers (an older one, or another producer's) is
// decoded and checked now: envelope.Check also tells records that are not
// envelopes apart, and those are dropped. The hub keeps data (the NATS
// client hands every subscriber and fetch its own copy): the caller must not
// change it.
func (h *hub) add(subject string, data []byte, header map[string][]string, at time.Time) {
	ev := &Event{Subject: subject, Seen: at, h: envelope.DecodeHeader(header)}
	if ev.h.ID == "" {
		e, ok := decode(data)
		if !ok {
			return
		}
		ev.env, ev.h = e, headerOf(e)
	}
	ev.Raw = data
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids[ev.h.ID] {
		return
	}
	h.n++
	ev.N = h.n
	i, _ := slices.BinarySearchFunc(h.events, at, func(x *Event, t time.Time) int { return x.Seen.Compare(t) + boolInt(x.Seen.Equal(t)) })
	h.events = slices.Insert(h.events, i, ev)
	h.ids[ev.h.ID] = true
	for len(h.events) > h.size {
		delete(h.ids, h.events[0].h.ID)
		h.events = h.events[1:]
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// boolInt keeps equal timestamps in arrival order (insert after them).
func boolInt(b bool) int {
	if b {
		return -1
	}
	return 0
}

// wait returns a channel closed at the next change.
func (h *hub) wait() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// filter returns the events keep accepts, newest first, at most limit.
func (h *hub) filter(limit int, keep func(*Event) bool) []*Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Event
	for i := len(h.events) - 1; i >= 0 && len(out) < limit; i-- {
		if keep(h.events[i]) {
			out = append(out, h.events[i])
		}
	}
	return out
}

// byID returns the event of envelope id, or nil.
func (h *hub) byID(id string) *Event {
	got := h.filter(1, func(e *Event) bool { return e.h.ID == id })
	if len(got) == 0 {
		return nil
	}
	return got[0]
}

// rates counts the inbound envelopes per provider seen in the last window.
func (h *hub) rates(window time.Duration) map[string]int {
	since := h.now().Add(-window)
	out := map[string]int{}
	for _, e := range h.filter(h.size, func(e *Event) bool { return e.Seen.After(since) && strings.HasPrefix(e.Subject, "in.") }) {
		out[string(e.h.Channel)]++
	}
	return out
}
