package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// cutShortKV is a bucket whose first write is stored but never answered
// (the reply lost as a leader is elected); every later write finds the key
// written, as the stream answers a write at a revision that moved on.
type cutShortKV struct {
	jetstream.KeyValue
	writes  int
	waiting chan struct{} // closed when the first write waits for its answer
}

func (k *cutShortKV) write(ctx context.Context) (uint64, error) {
	k.writes++
	if k.writes == 1 {
		close(k.waiting)
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return 0, fmt.Errorf("%w: %w", jetstream.ErrKeyExists, jetstream.ErrKeyRevisionMismatch)
}

func (k *cutShortKV) Create(ctx context.Context, _ string, _ []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	return k.write(ctx)
}

func (k *cutShortKV) Update(ctx context.Context, _ string, _ []byte, _ uint64) (uint64, error) {
	return k.write(ctx)
}

// TestWriteCutShortByElectionIsUnknown: a Create or Update whose attempt
// is cut short when a leader is elected (its request may have reached the
// stream) and whose retry finds the key written reports an unknown outcome
// (ErrUnavailable), not "key exists" or "revision mismatch": the agent took
// those for another copy's task and acknowledged its trigger, and the task
// it had itself created was never carried on (TestClusterFaults' lost
// issue).
func TestWriteCutShortByElectionIsUnknown(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"create", "update"} {
		b := &Bus{cfg: Config{RequestTimeout: time.Minute, RetryFor: time.Minute}, log: slog.New(slog.DiscardHandler), leaders: newBeacon()}
		kv := &cutShortKV{waiting: make(chan struct{})}
		r := &retrying{KeyValue: kv, b: b}
		go func() { <-kv.waiting; b.leaders.fire() }()
		var err error
		if op == "create" {
			_, err = r.Create(t.Context(), "task", []byte("v"))
		} else {
			_, err = r.Update(t.Context(), "task", []byte("v"), 7)
		}
		if kv.writes != 2 || errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
			!errors.Is(err, ErrUnavailable) {
			t.Errorf("%s cut short by an election, then retried: %d writes, err %v; want 2 writes and an unknown outcome (ErrUnavailable)",
				op, kv.writes, err)
		}
	}
}
