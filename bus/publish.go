package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/envelope"
)

// PublishResult is JetStream's acknowledgement of a publish.
type PublishResult struct {
	// Stream and Sequence locate the stored message.
	Stream   string
	Sequence uint64
	// Duplicate is true when a message with the same id was already stored inside
	// the duplicate window; nothing new was stored.
	Duplicate bool
}

// PublishOption adjusts one Publish call.
type PublishOption func(*publishOpts)

type publishOpts struct {
	msgID  string
	header map[string]string
}

// WithMsgID sets Nats-Msg-Id, the de-duplication identity. Inbound envelopes use
// the provider's delivery identity; the default is the envelope id.
func WithMsgID(id string) PublishOption { return func(o *publishOpts) { o.msgID = id } }

// WithHeader adds a header to the published message.
func WithHeader(key, value string) PublishOption {
	return func(o *publishOpts) {
		if o.header == nil {
			o.header = map[string]string{}
		}
		o.header[key] = value
	}
}

// ErrInvalidEnvelope wraps the *envelope.ValidationError of an envelope Publish refused.
var ErrInvalidEnvelope = errors.New("invalid envelope")

// Publish validates e against the schema, publishes it to the relative subject
// with Nats-Msg-Id set, and waits for JetStream's ack. An invalid envelope is
// never published: the error wraps ErrInvalidEnvelope and the
// *envelope.ValidationError. Without a deadline on ctx, the bus's publish
// timeout applies.
func (b *Bus) Publish(ctx context.Context, subject string, e *envelope.Envelope, opts ...PublishOption) (PublishResult, error) {
	msg, err := b.buildMsg(subject, e, opts)
	if err != nil {
		return PublishResult{}, err
	}
	var done func(error)
	if b.cfg.Trace != nil {
		done = b.cfg.Trace.publish(ctx, msg)
	}
	res, err := b.publishMsg(ctx, b.StreamName(subject), msg)
	if done != nil {
		done(err)
	}
	if err != nil {
		return res, fmt.Errorf("publish %s to %s: %w", e.ID, subject, err)
	}
	return res, nil
}

// PublishAsync validates e and publishes it without waiting for the ack, for
// producers that keep many publishes in flight. While Config.MaxAsyncPending
// publishes are unacknowledged it waits for one of them to be acked: this
// back-pressure is bounded by ctx (by the bus's publish timeout when ctx has
// no deadline), and running out of it is an error wrapping ErrUnavailable and
// the context's error, never the client's "stalled" error. The future
// reports the ack or the error; PublishAsyncComplete tells when every publish
// was acked.
func (b *Bus) PublishAsync(ctx context.Context, subject string, e *envelope.Envelope, opts ...PublishOption) (_ jetstream.PubAckFuture, err error) {
	msg, err := b.buildMsg(subject, e, opts)
	if err != nil {
		return nil, err
	}
	if b.cfg.Trace != nil {
		if done := b.cfg.Trace.publish(ctx, msg); done != nil {
			defer func() { done(err) }()
		}
	}
	f, err := b.publishAsync(ctx, msg)
	if err != nil {
		b.countPublish(b.StreamName(subject), "error")
		return nil, fmt.Errorf("publish %s to %s: %w", e.ID, subject, err)
	}
	return f, nil
}

// asyncStallWait is how long one attempt of an async publish waits for a
// free slot before PublishAsync checks its context and waits again.
const asyncStallWait = 250 * time.Millisecond

// publishAsync publishes msg, waiting while the client holds MaxAsyncPending
// unacknowledged publishes. The client wakes a stalled publisher as soon as
// an ack frees a slot, so the wait is not a poll; the stall wait only bounds
// how long it goes without looking at ctx.
func (b *Bus) publishAsync(ctx context.Context, msg *nats.Msg) (jetstream.PubAckFuture, error) {
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	for {
		wait := asyncStallWait
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d))
		}
		if err := ctx.Err(); err != nil || wait <= 0 {
			if err == nil {
				err = context.DeadlineExceeded
			}
			return nil, fmt.Errorf("%w: %d async publishes unacknowledged: %w", ErrUnavailable, b.cfg.MaxAsyncPending, err)
		}
		f, err := b.js.PublishMsgAsync(msg, jetstream.WithStallWait(wait))
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, err
		}
	}
}

// PublishAsyncComplete is closed when every PublishAsync so far was acknowledged.
func (b *Bus) PublishAsyncComplete() <-chan struct{} { return b.js.PublishAsyncComplete() }

// buildMsg validates e and builds its NATS message.
func (b *Bus) buildMsg(subject string, e *envelope.Envelope, opts []PublishOption) (*nats.Msg, error) {
	err := envelope.Check(e)
	var data []byte
	if err == nil {
		data, err = e.Marshal()
	}
	if err != nil {
		b.countPublish(b.StreamName(subject), "invalid")
		return nil, fmt.Errorf("publish %s to %s: %w: %w", e.ID, subject, ErrInvalidEnvelope, err)
	}
	var o publishOpts
	for _, opt := range opts {
		opt(&o)
	}
	if o.msgID == "" {
		o.msgID = e.ID
	}
	abs := b.Subject(subject)
	if err := checkSubject(abs); err != nil {
		b.countPublish(b.StreamName(subject), "invalid")
		return nil, fmt.Errorf("publish %s: %w", e.ID, err)
	}
	msg := &nats.Msg{Subject: abs, Data: data, Header: make(nats.Header, 8)}
	envelope.EncodeHeader(e, msg.Header)
	for k, v := range o.header {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(jetstream.MsgIDHeader, o.msgID)
	return msg, nil
}

// publishMsg publishes an already built message and records metrics.
func (b *Bus) publishMsg(ctx context.Context, stream string, msg *nats.Msg) (PublishResult, error) {
	if stream == "" {
		return PublishResult{}, fmt.Errorf("no relay stream covers subject %s", msg.Subject)
	}
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	start := time.Now()
	ack, err := b.js.PublishMsg(ctx, msg)
	if err != nil {
		b.countPublish(stream, "error")
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return PublishResult{}, err
	}
	if b.metrics != nil {
		b.metrics.publishTime.WithLabelValues(stream).Observe(time.Since(start).Seconds())
	}
	if ack.Duplicate {
		b.countPublish(stream, "duplicate")
	} else {
		b.countPublish(stream, "ok")
	}
	return PublishResult{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// ErrUnavailable marks a publish that JetStream did not acknowledge in time or
// had no server to take; the caller may retry later (HTTP 503 at the edge).
var ErrUnavailable = errors.New("bus unavailable")

func (b *Bus) countPublish(stream, result string) {
	if b.metrics != nil {
		b.metrics.published.WithLabelValues(stream, result).Inc()
	}
}

// TraceHooks connect the bus to a tracer without the bus importing one:
// Publish is called before each publish with the message header (to write
// the trace context into) and returns what to call with the result;
// Consume is called before each handled delivery (with its absolute
// subject; the hooks name absolute subjects) and returns the handler's
// context (carrying the consumer span) and what to call with the handler's
// result. Either may return a nil function.
type TraceHooks struct {
	Publish func(ctx context.Context, subject string, h nats.Header) func(error)
	Consume func(ctx context.Context, subject string, m *Message) (context.Context, func(error))
}

func (t *TraceHooks) publish(ctx context.Context, msg *nats.Msg) func(error) {
	if t.Publish == nil {
		return nil
	}
	return t.Publish(ctx, msg.Subject, msg.Header)
}
