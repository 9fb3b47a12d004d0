package bus

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// CaughtUp reports whether the durable consumer whose info was just read has
// acked every message of its filter its stream holds: nothing unacknowledged,
// and no matching message after its ack floor. It reads the stream rather
// than the consumer's pending count, which the server keeps from signals a
// goroutine of the stream sends (nats-server 2.10 and later): just after a
// publish was acknowledged the count may not include it yet, and a signal
// that comes after the consumer already took the message counts it once more
// until the consumer next finds nothing to deliver.
func CaughtUp(ctx context.Context, js jetstream.JetStream, info *jetstream.ConsumerInfo) (bool, error) {
	if info.NumAckPending != 0 {
		return false, nil
	}
	filters := info.Config.FilterSubjects
	if f := info.Config.FilterSubject; f != "" {
		filters = append(filters, f)
	}
	if len(filters) == 0 {
		filters = []string{">"}
	}
	s, err := js.Stream(ctx, info.Stream)
	if err != nil {
		return false, err
	}
	for _, f := range filters {
		m, err := s.GetMsg(ctx, info.AckFloor.Stream+1, jetstream.WithGetMsgSubject(f))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return false, err
		case m.Sequence > info.AckFloor.Stream:
			return false, nil
		}
	}
	return true, nil
}
