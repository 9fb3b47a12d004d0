package bus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/envelope"
)

// Message is one delivery handed to a Handler: the validated envelope plus
// where it came from. It is valid only during the Handle call.
type Message struct {
	// Envelope is the decoded, schema-valid envelope.
	Envelope *envelope.Envelope
	// Subject is relative to the bus prefix ("in.github.issues").
	Subject string
	// Header is the NATS header; read-only.
	Header nats.Header
	// Data is the raw body.
	Data []byte
	// Delivered counts deliveries of this message, starting at 1.
	Delivered uint64
	// Retried counts the times this delivery was handled again in this
	// process after the bus was unavailable (ConsumerConfig.UnavailableHold):
	// for the handler, each is a redelivery that does not count in
	// Delivered.
	Retried int
	// StreamSeq is the message's sequence in its stream.
	StreamSeq uint64
	// Consumer is the durable consumer (worker type) handling the message.
	Consumer string
}

// Handler handles a message. Its error picks the outcome (see Classified): nil
// acks; a permanent error terms the message and dead-letters it; any other
// error naks it with its RetryDelay, or else a growing delay, until the
// consumer's MaxDeliver is reached, when it is dead-lettered too.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// Middleware wraps a Handler.
type Middleware func(Handler) Handler

// Chain applies middleware so the first one is outermost.
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// Recover turns a handler panic into a transient error carrying the stack, so
// the message is redelivered (and dead-lettered after MaxDeliver).
func Recover() Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, m *Message) (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("handler panic: %v\n%s", r, debug.Stack())
				}
			}()
			return next.Handle(ctx, m)
		})
	}
}

// Timeout bounds each Handle call.
func Timeout(d time.Duration) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, m *Message) error {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			return next.Handle(ctx, m)
		})
	}
}

// Classified is the one way an error says what to do with the message it
// failed, honoured by every consumer: Permanent reports that retrying cannot
// help (the message is termed and dead-lettered); RetryDelay, when positive,
// is how long to wait before the next attempt (for example an API's
// Retry-After), replacing the consumer's growing delay.
//
// The bus asks the first error in the chain that implements it (errors.As),
// so a wrapper decides over what it wraps. The provider clients' errors
// (mappers.APIError, github.PostError, slack.PostError, webhook.SendError)
// implement it; Permanent and RetryAfter classify any other error. An error
// that does not implement it is transient.
type Classified interface {
	error
	Permanent() bool
	RetryDelay() time.Duration
}

// PermanentError marks a failure that retrying cannot fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent reports true.
func (e *PermanentError) Permanent() bool { return true }

// RetryDelay reports 0: a permanent failure is not retried.
func (e *PermanentError) RetryDelay() time.Duration { return 0 }

// Permanent marks err as permanent: the message is termed and dead-lettered.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is classified permanent: the first error in
// its chain implementing Classified says so.
func IsPermanent(err error) bool {
	var c Classified
	return errors.As(err, &c) && c.Permanent()
}

// RetryDelay is the redelivery delay err asks for: the RetryDelay of the
// first error in its chain implementing Classified, or 0 (the consumer's
// growing delay).
func RetryDelay(err error) time.Duration {
	var c Classified
	if errors.As(err, &c) {
		return max(c.RetryDelay(), 0)
	}
	return 0
}

// RetryError asks for redelivery after Delay.
type RetryError struct {
	Err   error
	Delay time.Duration
}

func (e *RetryError) Error() string { return fmt.Sprintf("retry after %s: %v", e.Delay, e.Err) }
func (e *RetryError) Unwrap() error { return e.Err }

// Permanent reports false: the failure is transient, whatever it wraps says.
func (e *RetryError) Permanent() bool { return false }

// RetryDelay is Delay.
func (e *RetryError) RetryDelay() time.Duration { return e.Delay }

// RetryAfter marks err as transient with a specific redelivery delay (for
// example an API's Retry-After). RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryError{Err: err, Delay: d}
}
