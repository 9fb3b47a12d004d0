package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
)

// DeadLetter is what the bus stores on dlq.{consumer}.{original subject} when
// a message cannot be handled: the original body and headers, the reason, how
// often it was delivered and where it came from.
type DeadLetter struct {
	// Subject is the original subject, relative to the bus prefix.
	Subject string `json:"subject"`
	// Consumer is the worker type that gave up on the message.
	Consumer string `json:"consumer"`
	// Reason says why, in words.
	Reason string `json:"reason"`
	// Deliveries is how many times the message was delivered.
	Deliveries uint64 `json:"deliveries"`
	// StreamSeq is the original message's sequence in its stream.
	StreamSeq uint64 `json:"stream_seq"`
	// Time is when it was dead-lettered.
	Time time.Time `json:"time"`
	// Envelope is the original body when it was JSON.
	Envelope json.RawMessage `json:"envelope,omitempty"`
	// Raw is the original body when it was not JSON.
	Raw []byte `json:"raw,omitempty"`
	// Header is the original message's header.
	Header map[string][]string `json:"header,omitempty"`
}

// Body returns the original message body.
func (d *DeadLetter) Body() []byte {
	if len(d.Envelope) > 0 {
		return d.Envelope
	}
	return d.Raw
}

// StoredDeadLetter is a dead letter with its sequence in the dead-letter stream,
// the id that `relay dlq replay` takes. Its JSON form is the dead letter's
// object with "seq" added.
type StoredDeadLetter struct {
	Seq uint64 `json:"seq"`
	DeadLetter
}

// maxReasonLine bounds the one-line form of a failure in logs and in the
// term reason JetStream advises; the dead letter keeps the whole reason.
const maxReasonLine = 1024

// deadLetter stores a dead letter for msg and terms it. If the dead letter
// cannot be stored the message is nak'ed instead, so nothing is lost.
func (b *Bus) deadLetter(ctx context.Context, cfg *ConsumerConfig, msg jetstream.Msg, m *Message, reason string, log *slog.Logger) {
	dl := DeadLetter{
		Subject:    m.Subject,
		Consumer:   cfg.Name,
		Reason:     reason,
		Deliveries: m.Delivered,
		StreamSeq:  m.StreamSeq,
		Time:       time.Now().UTC(),
		Header:     msg.Headers(),
	}
	if json.Valid(m.Data) {
		dl.Envelope = json.RawMessage(m.Data)
	} else {
		dl.Raw = m.Data
	}
	if err := b.publishDeadLetter(ctx, &dl); err != nil {
		log.Error("dead letter not stored; message will be redelivered", "subject", m.Subject, "reason", reason, "err", err)
		_ = msg.NakWithDelay(nakDelay(cfg.NakDelays, m.Delivered))
		b.outcome(cfg.Name, "nak")
		return
	}
	log.Warn("message dead-lettered", "subject", m.Subject, "stream_seq", m.StreamSeq,
		"deliveries", m.Delivered, "reason", clip.Line(reason, maxReasonLine))
	_ = msg.TermWithReason(clip.Line(reason, maxReasonLine))
	b.outcome(cfg.Name, "term")
	if b.metrics != nil {
		b.metrics.deadLetters.WithLabelValues(cfg.Name).Inc()
	}
}

func (b *Bus) publishDeadLetter(ctx context.Context, dl *DeadLetter) error {
	data, err := json.Marshal(dl)
	if err != nil {
		return fmt.Errorf("marshal dead letter: %w", err)
	}
	rel := envelope.SubjectDLQ + "." + dl.Consumer + "." + dl.Subject
	msg := &nats.Msg{Subject: b.Subject(rel), Data: data, Header: nats.Header{}}
	// One dead letter per original message and consumer, even if dead-lettering
	// is retried.
	msg.Header.Set(jetstream.MsgIDHeader, "dlq:"+dl.Consumer+":"+dl.Subject+":"+strconv.FormatUint(dl.StreamSeq, 10))
	_, err = b.publishMsg(ctx, b.StreamName(rel), msg)
	return err
}

// DeadLetters lists the stored dead letters, oldest first, at most limit of
// them (0 means all). The list is never nil, so it encodes as a JSON array.
func (b *Bus) DeadLetters(ctx context.Context, limit int) ([]StoredDeadLetter, error) {
	stream := b.StreamName(envelope.SubjectDLQ)
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream %s: %w", stream, err)
	}
	out := []StoredDeadLetter{}
	if info.State.Msgs == 0 {
		return out, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		if limit > 0 && len(out) >= limit {
			break
		}
		d, err := b.DeadLetter(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted (replayed) or aged out
		}
		if err != nil {
			return out, err
		}
		out = append(out, *d)
	}
	return out, nil
}

// DeadLetter reads one dead letter by its sequence. A missing one is
// jetstream.ErrMsgNotFound.
func (b *Bus) DeadLetter(ctx context.Context, seq uint64) (*StoredDeadLetter, error) {
	stream := b.StreamName(envelope.SubjectDLQ)
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream %s: %w", stream, err)
	}
	raw, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("no dead letter %d in %s (replayed or deleted already, or never stored; relay dlq list shows them): %w", seq, stream, err)
	}
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: %w", seq, err)
	}
	var d StoredDeadLetter
	if err := json.Unmarshal(raw.Data, &d.DeadLetter); err != nil {
		return nil, fmt.Errorf("dead letter %d: not a dead letter record: %w", seq, err)
	}
	d.Seq = seq
	return &d, nil
}

// Replay re-publishes dead letter seq to its original subject, for its
// consumer only, and removes it from the dead-letter stream. Replaying the same
// dead letter twice inside the duplicate window publishes it once.
func (b *Bus) Replay(ctx context.Context, seq uint64) (PublishResult, error) {
	d, err := b.DeadLetter(ctx, seq)
	if err != nil {
		return PublishResult{}, err
	}
	msg := &nats.Msg{Subject: b.Subject(d.Subject), Data: d.Body(), Header: nats.Header{}}
	for k, v := range d.Header {
		msg.Header[k] = v
	}
	msg.Header.Set(jetstream.MsgIDHeader, "replay:"+b.StreamName(envelope.SubjectDLQ)+":"+strconv.FormatUint(seq, 10))
	msg.Header.Set(HeaderReplayFor, d.Consumer)
	res, err := b.publishMsg(ctx, b.StreamName(d.Subject), msg)
	if err != nil {
		return res, fmt.Errorf("replay dead letter %d to %s: %w", seq, d.Subject, err)
	}
	s, err := b.js.Stream(ctx, b.StreamName(envelope.SubjectDLQ))
	if err == nil {
		err = s.DeleteMsg(ctx, seq)
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return res, fmt.Errorf("replayed dead letter %d but could not remove it: %w", seq, err)
	}
	return res, nil
}
