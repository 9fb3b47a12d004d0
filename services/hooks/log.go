package hooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
)

// ReadLog returns the last n execution records on hook.executed (all when
// n <= 0), oldest first, only hook's when hook is set.
func ReadLog(ctx context.Context, b *bus.Bus, n int, hook string) ([]Execution, error) {
	stream := b.StreamName(SubjectExecuted)
	c, err := b.JetStream().OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subject(SubjectExecuted)},
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", SubjectExecuted, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", SubjectExecuted, err)
	}
	left := int(info.NumPending)
	out := []Execution{}
	for left > 0 {
		batch, err := c.Fetch(min(left, 256), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return out, fmt.Errorf("read %s: %w", SubjectExecuted, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			e, err := envelope.Parse(m.Data())
			if err != nil {
				continue
			}
			x, ok := ExecutionOf(e)
			if !ok || (hook != "" && x.Hook != hook) {
				continue
			}
			out = append(out, *x)
			if n > 0 && len(out) > n {
				out = out[1:]
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return out, fmt.Errorf("read %s: %w", SubjectExecuted, err)
		}
		if got == 0 {
			break
		}
		left -= got
	}
	return out, nil
}
