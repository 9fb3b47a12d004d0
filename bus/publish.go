package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/jsack"
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
	msg := syncMsgs.Get().(*nats.Msg)
	defer putSyncMsg(msg)
	body := syncBodies.Get().(*[]byte)
	defer func() {
		if cap(msg.Data) <= maxPooledBody {
			*body = msg.Data[:0]
			syncBodies.Put(body)
		}
	}()
	if err := b.buildMsg(msg, subject, e, opts, *body); err != nil {
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
// back-pressure is bounded by the bus's request timeout (ctx's deadline when
// earlier), and running out of it is an error wrapping ErrUnavailable and
// the context's error, never the client's "stalled" error. The future
// reports the ack or the error; PublishAsyncComplete tells when every publish
// was acked.
func (b *Bus) PublishAsync(ctx context.Context, subject string, e *envelope.Envelope, opts ...PublishOption) (_ jetstream.PubAckFuture, err error) {
	// An async message stays with its future (which resends it), so it is
	// never reused.
	msg := &nats.Msg{Header: make(nats.Header, 8)}
	if err := b.buildMsg(msg, subject, e, opts, nil); err != nil {
		return nil, err
	}
	if b.cfg.Trace != nil {
		if done := b.cfg.Trace.publish(ctx, msg); done != nil {
			defer func() { done(err) }()
		}
	}
	f, err := b.publishAsync(ctx, msg)
	if err != nil {
		b.countPublish(b.StreamName(subject), resultError)
		return nil, fmt.Errorf("publish %s to %s: %w", e.ID, subject, err)
	}
	return f, nil
}

// asyncStallWait is how long one attempt of an async publish waits for a
// free slot before PublishAsync checks its context and waits again.
const asyncStallWait = 250 * time.Millisecond

// stallWait is the stall option of an attempt that may wait asyncStallWait,
// built once: the common case allocates no option per publish.
var stallWait = jetstream.WithStallWait(asyncStallWait)

// publishAsync publishes msg, waiting while the client holds MaxAsyncPending
// unacknowledged publishes. The client wakes a stalled publisher as soon as
// an ack frees a slot, so the wait is not a poll; the stall wait only bounds
// how long it goes without looking at ctx. The wait ends RequestTimeout
// after the call, or at ctx's deadline when that is earlier; no timer or
// context is made unless the publisher actually has to wait.
func (b *Bus) publishAsync(ctx context.Context, msg *nats.Msg) (jetstream.PubAckFuture, error) {
	deadline := time.Now().Add(b.cfg.RequestTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, b.stalled(err)
		}
		opt := stallWait
		if left := time.Until(deadline); left <= 0 {
			return nil, b.stalled(context.DeadlineExceeded)
		} else if left < asyncStallWait {
			opt = jetstream.WithStallWait(left)
		}
		f, err := b.js.PublishMsgAsync(msg, opt)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, err
		}
	}
}

// stalled is the error of an async publish that found no free slot in time.
func (b *Bus) stalled(err error) error {
	return fmt.Errorf("%w: %d async publishes unacknowledged: %w", ErrUnavailable, b.cfg.MaxAsyncPending, err)
}

// PublishAsyncComplete is closed when every PublishAsync so far was acknowledged.
func (b *Bus) PublishAsyncComplete() <-chan struct{} { return b.js.PublishAsyncComplete() }

// syncMsgs are the messages of synchronous publishes, reused: once
// PublishMsg returned, the client holds no reference to its message.
var syncMsgs = sync.Pool{New: func() any { return &nats.Msg{Header: make(nats.Header, 8)} }}

// syncBodies are the bodies of synchronous publishes, reused like their
// messages; one over maxPooledBody is not kept.
var syncBodies = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

const maxPooledBody = 64 << 10

// putSyncMsg empties msg, keeping its header map, and returns it to the pool.
func putSyncMsg(msg *nats.Msg) {
	h := msg.Header
	clear(h)
	*msg = nats.Msg{Header: h}
	syncMsgs.Put(msg)
}

// buildMsg validates e and fills msg (empty, with an empty header map) with
// its subject, body and headers. The body is written into body's array
// when it has one (nil: a new one).
func (b *Bus) buildMsg(msg *nats.Msg, subject string, e *envelope.Envelope, opts []PublishOption, body []byte) error {
	err := envelope.Check(e)
	var data []byte
	if err == nil {
		if body == nil {
			body = make([]byte, 0, 512+len(e.Content))
		}
		if data, err = e.AppendMarshal(body[:0]); err != nil {
			err = fmt.Errorf("marshal envelope %s: %w", e.ID, err)
		}
	}
	if err != nil {
		b.countPublish(b.StreamName(subject), resultInvalid)
		return fmt.Errorf("publish %s to %s: %w: %w", e.ID, subject, ErrInvalidEnvelope, err)
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
		b.countPublish(b.StreamName(subject), resultInvalid)
		return fmt.Errorf("publish %s: %w", e.ID, err)
	}
	msg.Subject, msg.Data = abs, data
	envelope.EncodeHeader(e, msg.Header)
	for k, v := range o.header {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(jetstream.MsgIDHeader, o.msgID)
	return nil
}

// publishMsg publishes an already built message and records metrics.
func (b *Bus) publishMsg(ctx context.Context, stream string, msg *nats.Msg) (PublishResult, error) {
	if stream == "" {
		return PublishResult{}, fmt.Errorf("no relay stream covers subject %s", msg.Subject)
	}
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	start := time.Now()
	ack, err := jsack.Publish(ctx, b.nc, msg)
	if err != nil {
		b.countPublish(stream, resultError)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return PublishResult{}, err
	}
	if b.metrics != nil {
		sm := b.metrics.stream(stream)
		sm.publishTime.Observe(time.Since(start).Seconds())
		if ack.Duplicate {
			sm.duplicate.Inc()
		} else {
			sm.ok.Inc()
		}
	}
	return PublishResult{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// ErrUnavailable marks a publish that JetStream did not acknowledge in time or
// had no server to take; the caller may retry later (HTTP 503 at the edge).
var ErrUnavailable = errors.New("bus unavailable")

func (b *Bus) countPublish(stream, result string) {
	if b.metrics != nil {
		b.metrics.stream(stream).count(result).Inc()
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
