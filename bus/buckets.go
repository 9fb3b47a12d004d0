package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/internal/jsack"
)

// OpenBucket creates or opens the file-backed key-value bucket name, whose
// keys live for ttl (0: for ever); description says what it holds. It
// follows the bus's replica count, as every bucket opened through
// JetStream does, and its error names the bucket. Its writes (Put, Create,
// Update) go straight to the bucket's stream, their acks read without
// encoding/json (jsack.Bucket); their results and errors are jetstream's.
// Each of its requests waits at most the bus's RequestTimeout.
func (b *Bus) OpenBucket(ctx context.Context, name, description string, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      name,
		Description: description,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", name, err)
	}
	return jsack.Bucket(b.js, kv), nil
}
