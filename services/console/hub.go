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
	// Env is the parsed envelope; Raw its JSON.
	Env *envelope.Envelope
	Raw json.RawMessage
}

// Actor is meta.source.actor, or "".
func (e *Event) Actor() string {
	if e.Env.Meta.Source == nil {
		return ""
	}
	return e.Env.Meta.Source.Actor
}

// Delivery is meta.source.delivery_id, or "".
func (e *Event) Delivery() string {
	if e.Env.Meta.Source == nil {
		return ""
	}
	return e.Env.Meta.Source.DeliveryID
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
			h.add(h.bus.Relative(m.Subject), m.Data, h.now())
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
			h.add(h.bus.Relative(m.Subject()), m.Data(), at)
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
// The bus validated every envelope against the schema when it was published,
// so the console only decodes and applies envelope.Check (the schema's rules
// on the decoded value, which also tells records that are not envelopes
// apart) instead of validating the raw JSON again: a schema validation of
// every message cost the whole relay a tenth of its CPU. envelope.ParseFast
// decodes the usual envelope in one pass to the value encoding/json would
// give; anything it leaves goes through encoding/json.
func (h *hub) add(subject string, data []byte, at time.Time) {
	e, ok := envelope.ParseFast(data)
	if !ok && json.Unmarshal(data, &e) != nil || envelope.Check(e) != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids[e.ID] {
		return
	}
	h.n++
	ev := &Event{N: h.n, Subject: subject, Seen: at, Env: e, Raw: json.RawMessage(slices.Clone(data))}
	i, _ := slices.BinarySearchFunc(h.events, at, func(x *Event, t time.Time) int { return x.Seen.Compare(t) + boolInt(x.Seen.Equal(t)) })
	h.events = slices.Insert(h.events, i, ev)
	h.ids[e.ID] = true
	for len(h.events) > h.size {
		delete(h.ids, h.events[0].Env.ID)
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
	got := h.filter(1, func(e *Event) bool { return e.Env.ID == id })
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
		out[string(e.Env.Channel)]++
	}
	return out
}
