package story

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
)

// scanWait bounds one stream scan when the caller's context has no deadline.
const scanWait = time.Minute

// matcher decides which messages belong to the story. It grows the sets of
// tasks and deliveries as it goes: a matching inbound webhook adds the task
// it starts and its delivery id (what a hook execution it triggered
// carries), a matching work message the task it carries.
type matcher struct {
	query      string
	tasks      map[string]bool
	deliveries map[string]bool
	taskID     bool // the query may be a task id (UUID-shaped)
}

func newMatcher(q string) *matcher {
	return &matcher{query: q, tasks: map[string]bool{}, deliveries: map[string]bool{}, taskID: len(q) == 36}
}

// match reports whether a message with these header fields belongs to the
// story, remembering its task if so.
func (m *matcher) match(h envelope.HeaderFields, inbound bool) bool {
	q := m.query
	started := ""
	if inbound && h.ID != "" {
		if m.taskID || h.Delivery == q || h.Thread == q {
			started = envelope.TaskOf(h.ID)
		}
	}
	ok := h.Delivery == q || h.Thread == q || h.TaskID == q || h.ID == q ||
		(h.TaskID != "" && m.tasks[h.TaskID]) || (h.Delivery != "" && m.deliveries[h.Delivery]) ||
		(started != "" && (started == q || m.tasks[started]))
	if !ok {
		return false
	}
	if started != "" {
		m.tasks[started] = true
		if h.Delivery != "" {
			m.deliveries[h.Delivery] = true
		}
	}
	if h.TaskID != "" {
		m.tasks[h.TaskID] = true
	}
	return true
}

// found is a matching message: where it is, and its body when the scan read
// it (dead letters).
type found struct {
	stream  string
	seq     uint64
	subject string
	time    time.Time
	header  nats.Header
	data    []byte
}

// reader scans the streams and collects the matching messages.
type reader struct {
	b       *bus.Bus
	m       *matcher
	found   []found
	scanned int
}

// scan reads stream from the time from (zero: all of it) and records the
// messages that match. headersOnly reads no bodies; otherwise the bodies
// are dead letters whose original header decides. It returns the time of
// the first match.
func (r *reader) scan(ctx context.Context, stream string, from time.Time, headersOnly bool) (time.Time, error) {
	js := r.b.JetStream()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return time.Time{}, fmt.Errorf("stream %s: %w", stream, err)
	}
	state := s.CachedInfo().State
	if state.Msgs == 0 || (!from.IsZero() && state.LastTime.Before(from)) {
		return time.Time{}, nil
	}
	cfg := jetstream.OrderedConsumerConfig{HeadersOnly: headersOnly, InactiveThreshold: 30 * time.Second}
	if !from.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
	}
	c, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return time.Time{}, fmt.Errorf("read stream %s: %w", stream, err)
	}
	it, err := c.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return time.Time{}, fmt.Errorf("read stream %s: %w", stream, err)
	}
	defer it.Stop()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, scanWait)
		defer cancel()
	}
	return r.drain(ctx, stream, it, state.LastSeq, headersOnly)
}

// drain reads it up to the last sequence the stream had when the scan began.
func (r *reader) drain(ctx context.Context, stream string, it jetstream.MessagesContext, last uint64, headersOnly bool) (time.Time, error) {
	var first time.Time
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return first, fmt.Errorf("read stream %s: %w", stream, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return first, fmt.Errorf("read stream %s: %w", stream, err)
		}
		r.scanned++
		if r.consider(stream, msg, md, headersOnly) && first.IsZero() {
			first = md.Timestamp
		}
		if md.NumPending == 0 || md.Sequence.Stream >= last {
			return first, nil
		}
	}
}

// consider records msg when it matches.
func (r *reader) consider(stream string, msg jetstream.Msg, md *jetstream.MsgMetadata, headersOnly bool) bool {
	f := found{stream: stream, seq: md.Sequence.Stream, subject: r.b.Relative(msg.Subject()),
		time: md.Timestamp, header: msg.Headers()}
	h := f.header
	if !headersOnly {
		var dl bus.DeadLetter
		if json.Unmarshal(msg.Data(), &dl) != nil {
			return false
		}
		h = dl.Header
		f.data = msg.Data()
	}
	if !r.m.match(envelope.DecodeHeader(h), stream == r.b.StreamName(envelope.SubjectInbound)) {
		return false
	}
	r.found = append(r.found, f)
	return true
}

// hops fetches the bodies of the matches and turns them into st's hops.
func (r *reader) hops(ctx context.Context, st *Story, limit int) error {
	streams := map[string]jetstream.Stream{}
	for _, f := range r.found {
		if len(st.Hops) >= limit {
			break
		}
		if f.data == nil {
			s, ok := streams[f.stream]
			if !ok {
				var err error
				if s, err = r.b.JetStream().Stream(ctx, f.stream); err != nil {
					return fmt.Errorf("stream %s: %w", f.stream, err)
				}
				streams[f.stream] = s
			}
			raw, err := s.GetMsg(ctx, f.seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // aged out or deleted since the scan
			}
			if err != nil {
				return fmt.Errorf("read %s message %d: %w", f.stream, f.seq, err)
			}
			f.data, f.header = raw.Data, raw.Header
		}
		h := hopOf(f)
		st.Hops = append(st.Hops, h)
		st.note(f, h)
	}
	st.finish()
	return nil
}

// note records the ids a hop adds to the story.
func (st *Story) note(f found, h Hop) {
	fields := envelope.DecodeHeader(f.header)
	if h.Kind == KindDeadLetter {
		var dl bus.DeadLetter
		if json.Unmarshal(f.data, &dl) == nil {
			fields = envelope.DecodeHeader(dl.Header)
		}
	}
	if st.Thread == "" {
		st.Thread = fields.Thread
	}
	st.Tasks = addID(st.Tasks, h.Task)
	st.Deliveries = addID(st.Deliveries, fields.Delivery)
}
