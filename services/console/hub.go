package console

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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

// hub holds the last envelopes of the bus in a ring while the console is
// looked at, and wakes the live pages when one arrives. It follows the bus
// only on demand (follow.go): a request for its envelopes wakes it, a quiet
// period puts it to sleep and empties the ring. Safe for concurrent use.
type hub struct {
	bus  *bus.Bus
	size int
	idle time.Duration
	now  func() time.Time
	log  *slog.Logger

	mu      sync.Mutex
	events  []*Event // oldest first, at most size
	ids     map[string]bool
	n       int64
	changed chan struct{} // closed and replaced on every change

	// The follow state, guarded by fmu; a wake holds fmu while it loads,
	// so requests that come meanwhile wait for the one load.
	fmu    sync.Mutex
	fol    *follower // nil while the hub does not follow the bus
	live   int       // live pages holding the hub awake
	used   time.Time // the last request for the hub's envelopes
	timer  *time.Timer
	closed bool
}

// newHub returns a sleeping hub; a nil log discards.
func newHub(b *bus.Bus, size int, idle time.Duration, now func() time.Time, log *slog.Logger) *hub {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &hub{bus: b, size: size, idle: idle, now: now, log: log, ids: map[string]bool{}, changed: make(chan struct{})}
}

// load adds the last envelopes of a stream (at most size), in stream order,
// to the ring, reading up to the stream's last sequence
// (not a count: messages age out of the streams, and an operator may delete
// some); then, in one more fetch that does not wait,
// what the stream stored since it was asked for its last sequence: a
// message the server routed just before the hub's subscription counted may
// be stored a moment after that answer.
func (h *hub) load(ctx context.Context, stream string) error {
	st, err := h.bus.JetStream().Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("console: load %s: %w", stream, err)
	}
	state := st.CachedInfo().State
	from := max(state.FirstSeq, 1)
	if state.LastSeq >= uint64(h.size) {
		from = max(from, state.LastSeq-uint64(h.size)+1)
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
	if err != nil {
		return fmt.Errorf("console: load %s: %w", stream, err)
	}
	for next := from; state.Msgs > 0 && next <= state.LastSeq; {
		batch, err := c.Fetch(int(min(state.LastSeq+1-next, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("console: load %s: %w", stream, err)
		}
		seq, got := h.addBatch(batch)
		if got == 0 {
			break
		}
		next = seq + 1
	}
	batch, err := c.FetchNoWait(256)
	if err != nil {
		return fmt.Errorf("console: load %s: %w", stream, err)
	}
	h.addBatch(batch)
	return nil
}

// addBatch adds a fetched batch to the ring, each message
// at the time the stream stored it; it returns the stream sequence of the
// last message and how many there were.
func (h *hub) addBatch(batch jetstream.MessageBatch) (seq uint64, got int) {
	for m := range batch.Messages() {
		got++
		at := h.now()
		if md, _ := m.Metadata(); md != nil {
			at, seq = md.Timestamp, md.Sequence.Stream
		}
		h.add(h.bus.Relative(m.Subject()), m.Data(), m.Headers(), at)
	}
	return seq, got
}

// add records an envelope seen at (anything else is ignored); a repeat is
// ignored too.
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
	if ev, ok := newEvent(subject, data, header, at); ok {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.insert(ev)
	}
}

// newEvent is the event of a message seen at, or false when the message is
// not an envelope.
func newEvent(subject string, data []byte, header map[string][]string, at time.Time) (*Event, bool) {
	ev := &Event{Subject: subject, Seen: at, h: envelope.DecodeHeader(header)}
	if ev.h.ID == "" {
		e, ok := decode(data)
		if !ok {
			return nil, false
		}
		ev.env, ev.h = e, headerOf(e)
	}
	ev.Raw = data
	return ev, true
}

// insert puts ev in the ring at its time, unless the ring holds its
// envelope already. h.mu is held.
func (h *hub) insert(ev *Event) {
	if h.ids[ev.h.ID] {
		return
	}
	h.n++
	ev.N = h.n
	i, _ := slices.BinarySearchFunc(h.events, ev.Seen, func(x *Event, t time.Time) int { return x.Seen.Compare(t) + boolInt(x.Seen.Equal(t)) })
	h.events = slices.Insert(h.events, i, ev)
	h.ids[ev.h.ID] = true
	for len(h.events) > h.size {
		delete(h.ids, h.events[0].h.ID)
		h.events = h.events[1:]
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// addMeanwhile adds the messages the subscriptions delivered while the hub
// loaded the streams, in the order they came. A message the load found keeps
// the time the stream stored it. One the load did not find was published
// after the load read its stream, so after every envelope the ring holds
// that did not come this way (those were published before the
// subscriptions were all in place), and before the loaded ones that came
// after it: it is put right after the envelope that came before it, at that
// envelope's time (its own stored time is not known), or after the others
// (just before the first loaded one that came, when the load found only
// those; at the time it is added, when the load found nothing).
// (The subscriptions start one subject root after another: an envelope
// published meanwhile on a root not yet subscribed comes only from the
// load, so a loaded envelope must not move to the time its copy came.)
func (h *hub) addMeanwhile(msgs []*nats.Msg) {
	evs := make([]*Event, 0, len(msgs))
	came := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		if ev, ok := newEvent(h.bus.Relative(m.Subject), m.Data, m.Header, time.Time{}); ok {
			evs = append(evs, ev)
			came[ev.h.ID] = true
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var last, first time.Time
	loaded := make(map[string]time.Time) // the loaded envelopes that also came
	for _, e := range h.events {
		switch {
		case came[e.h.ID]:
			loaded[e.h.ID] = e.Seen
			if first.IsZero() || e.Seen.Before(first) {
				first = e.Seen
			}
		case e.Seen.After(last):
			last = e.Seen
		}
	}
	if last.IsZero() { // nothing was loaded but what also came
		last = h.now()
		if !first.IsZero() {
			last = first.Add(-time.Nanosecond)
		}
	}
	for _, ev := range evs {
		if at, ok := loaded[ev.h.ID]; ok {
			if at.After(last) {
				last = at
			}
			continue
		}
		ev.Seen = last
		h.insert(ev)
	}
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

// count is how many envelopes the hub holds.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
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
