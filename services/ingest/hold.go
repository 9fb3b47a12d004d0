package ingest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/mappers"
)

// The retry schedule of a held publish: the first retry comes after about
// holdFirst, each next one after twice the last, up to holdMax, each
// jittered to between half and all of it. A stream leader elected while the
// request waits is found within holdMax of its election.
const (
	holdFirst = 20 * time.Millisecond
	holdMax   = 250 * time.Millisecond
	// holdAttempt bounds one publish attempt: a request to a stream whose
	// leader died may go unanswered rather than refused; the next attempt,
	// with the same message id, cannot store it twice.
	holdAttempt = time.Second
)

// errHeldFull is the error of a publish not retried because Config.MaxHeld
// requests are held already.
var errHeldFull = errors.New("too many requests held while the bus is unavailable")

// holder retries one request's publishes while the bus is unavailable,
// holding one of the gateway's held tokens from the first failure until
// release.
type holder struct {
	s    *Service
	held bool
}

// publish publishes it, retrying an ErrUnavailable failure with the same
// message id until ctx's deadline would pass before the next attempt.
func (h *holder) publish(ctx context.Context, it mappers.Item) (bus.PublishResult, error) {
	pr, err := h.attempt(ctx, it)
	if err == nil || !errors.Is(err, bus.ErrUnavailable) {
		return pr, err
	}
	if !h.held {
		select {
		case h.s.held <- struct{}{}:
			h.held = true
		default:
			return pr, fmt.Errorf("%w (%d): %w", errHeldFull, cap(h.s.held), err)
		}
	}
	deadline, _ := ctx.Deadline()
	wait := holdFirst
	for attempt := 2; ; attempt++ {
		d := wait/2 + rand.N(wait/2+1)
		if time.Until(deadline) <= d {
			return pr, fmt.Errorf("held %d attempts: %w", attempt-1, err)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return pr, fmt.Errorf("held %d attempts: %w", attempt-1, err)
		case <-t.C:
		}
		pr, err = h.attempt(ctx, it)
		if err == nil || !errors.Is(err, bus.ErrUnavailable) {
			return pr, err
		}
		wait = min(2*wait, holdMax)
	}
}

// attempt publishes it once, waiting at most holdAttempt.
func (h *holder) attempt(ctx context.Context, it mappers.Item) (bus.PublishResult, error) {
	ctx, cancel := context.WithTimeout(ctx, holdAttempt)
	defer cancel()
	return h.s.pub.Publish(ctx, it.Subject, it.Envelope, bus.WithMsgID(it.MsgID))
}

// release gives back the held token, if taken.
func (h *holder) release() {
	if h.held {
		<-h.s.held
		h.held = false
	}
}
