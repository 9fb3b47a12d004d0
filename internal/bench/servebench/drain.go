package servebench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
)

// backlog is the sum of pending and unacknowledged messages over every
// durable consumer of every stream.
func backlog(ctx context.Context, js jetstream.JetStream) (int, error) {
	total := 0
	err := durables(ctx, js, func(ci *jetstream.ConsumerInfo) {
		total += int(ci.NumPending) + ci.NumAckPending
	})
	return total, err
}

// delivered is the number of messages each durable consumer was sent so far.
func delivered(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	err := durables(ctx, js, func(ci *jetstream.ConsumerInfo) { out[ci.Name] = ci.Delivered.Consumer })
	return out, err
}

// stored is the number of messages each stream stored so far: its last
// sequence.
func stored(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	list := js.ListStreams(ctx)
	for si := range list.Info() {
		out[si.Config.Name] = si.State.LastSeq
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	return out, nil
}

// durables calls f with the info of every durable consumer of every stream.
func durables(ctx context.Context, js jetstream.JetStream, f func(*jetstream.ConsumerInfo)) error {
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
		list := st.ListConsumers(ctx)
		for ci := range list.Info() {
			if ci.Config.Durable != "" {
				f(ci)
			}
		}
		if err := list.Err(); err != nil {
			return fmt.Errorf("consumers of %s: %w", name, err)
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("streams: %w", err)
	}
	return nil
}

// caughtUp reads every durable consumer of every stream once: the backlog
// (as backlog sums it) and whether each has acked every message of its
// filter (bus.CaughtUp: exact, where the pending counts can read one message
// too many for a while, or none for one just stored).
func caughtUp(ctx context.Context, js jetstream.JetStream) (n int, all bool, err error) {
	all = true
	var first error
	err = durables(ctx, js, func(ci *jetstream.ConsumerInfo) {
		n += int(ci.NumPending) + ci.NumAckPending
		if all && first == nil {
			all, first = bus.CaughtUp(ctx, js, ci)
		}
	})
	return n, all && err == nil && first == nil, errors.Join(err, first)
}

// quietPolls is how many polls in a row must find no backlog: a handler that
// has acked its input may still be publishing what it produced.
const quietPolls = 3

// drained is when the consumers caught up and the child's CPU time then.
type drained struct {
	after time.Duration // since the load stopped
	cpu   time.Duration
}

// waitDrained polls the backlog every 50 ms until it has been zero quietPolls
// times in a row with done reporting true, and returns the time and the CPU
// reading of the first of them. done covers work no consumer holds while it
// waits (a suggestion between its last ack and the Slack post).
func waitDrained(ctx context.Context, js jetstream.JetStream, c *child, stopped time.Time, limit time.Duration, done func() bool) (drained, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var first drained
	quiet := 0
	for {
		n, caught, err := caughtUp(ctx, js)
		if err != nil {
			return drained{}, fmt.Errorf("backlog after %s: %w", time.Since(stopped).Round(time.Millisecond), err)
		}
		if !caught || !done() {
			quiet = 0
		} else if quiet++; quiet == 1 {
			at := time.Since(stopped)
			cpu, err := c.CPU()
			if err != nil {
				return drained{}, err
			}
			first = drained{after: at, cpu: cpu}
		}
		if quiet >= quietPolls {
			return first, nil
		}
		select {
		case <-ctx.Done():
			if caught {
				return drained{}, fmt.Errorf("backlog drained but the work after it not done within %s", limit)
			}
			return drained{}, fmt.Errorf("backlog of %d messages not drained within %s", n, limit)
		case <-tick.C:
		}
	}
}
