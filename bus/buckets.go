package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/internal/jsack"
)

// OpenBucket creates or opens the file-backed key-value bucket name, whose
// keys live for ttl (0: for ever); description says what it holds. It
// follows the bus's replica count, as every bucket opened through
// JetStream does, and its error names the bucket. While JetStream is slow
// or has no leader it waits (Ensure), with Ready naming the bucket; it
// returns an error only when ctx ends or for a setting the server refuses.
//
// Its writes (Put, Create, Update) go straight to the bucket's stream,
// their acks read without encoding/json (jsack.Bucket); their results and
// errors are jetstream's. Each of its requests waits at most the bus's
// RequestTimeout, and a transient failure (a timeout, no leader) is tried
// again as soon as a leader is elected, for at most RetryFor, then returned
// wrapping ErrUnavailable.
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
	return b.Bucket(kv), nil
}

// Bucket returns kv (a bucket made through JetStream()) with OpenBucket's
// requests: bounded, written straight to the stream, retried through a
// leader change.
func (b *Bus) Bucket(kv jetstream.KeyValue) jetstream.KeyValue {
	return &retrying{KeyValue: jsack.Bucket(b.js, kv), b: b}
}

// retrying retries a bucket's requests through a leader change (Bus.retry).
type retrying struct {
	jetstream.KeyValue
	b *Bus
}

func (r *retrying) Get(ctx context.Context, key string) (e jetstream.KeyValueEntry, err error) {
	err = r.b.retry(ctx, func(ctx context.Context) error { e, err = r.KeyValue.Get(ctx, key); return err })
	return e, err
}

func (r *retrying) GetRevision(ctx context.Context, key string, rev uint64) (e jetstream.KeyValueEntry, err error) {
	err = r.b.retry(ctx, func(ctx context.Context) error { e, err = r.KeyValue.GetRevision(ctx, key, rev); return err })
	return e, err
}

func (r *retrying) Put(ctx context.Context, key string, value []byte) (rev uint64, err error) {
	err = r.b.retry(ctx, func(ctx context.Context) error { rev, err = r.KeyValue.Put(ctx, key, value); return err })
	return rev, err
}

func (r *retrying) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return r.Put(ctx, key, []byte(value))
}

// Create retries as the others do; when an attempt whose outcome is
// unknown (it timed out, or was cut short when a leader was elected or the
// connection came back) is followed by one finding the key written, that
// may be the first attempt's write: Create then reports the failure as
// ErrUnavailable, not matching jetstream.ErrKeyExists (a caller taking
// "exists" for "someone else's" would drop its own work), and the caller's
// retry (a redelivery) finds the key.
func (r *retrying) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (rev uint64, err error) {
	unknown := false
	err = r.b.retry(ctx, func(ctx context.Context) error {
		rev, err = r.KeyValue.Create(ctx, key, value, opts...)
		if unknown && errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %w: create %s: an earlier attempt may have written it (%v)", ErrUnavailable, errAmbiguous, key, err)
		}
		unknown = unknown || outcomeUnknown(ctx, err)
		return err
	})
	return rev, err
}

// Update is Create's counterpart for a write at a revision.
func (r *retrying) Update(ctx context.Context, key string, value []byte, revision uint64) (rev uint64, err error) {
	unknown := false
	err = r.b.retry(ctx, func(ctx context.Context) error {
		rev, err = r.KeyValue.Update(ctx, key, value, revision)
		if unknown && errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %w: update %s: an earlier attempt may have written it (%v)", ErrUnavailable, errAmbiguous, key, err)
		}
		unknown = unknown || outcomeUnknown(ctx, err)
		return err
	})
	return rev, err
}

// outcomeUnknown reports whether a write that failed with err, on the
// attempt's context ctx, may have been written all the same: a transient
// failure, or any failure once ctx is done. An attempt cut short when a
// leader is elected (Bus.attempt) fails with context.Canceled, which is not
// transient, though its request may have reached the stream (the cluster
// test lost tasks that way: the retry found the key, and the agent took
// "exists" for another copy's task).
func outcomeUnknown(ctx context.Context, err error) bool {
	return err != nil && (Transient(err) || ctx.Err() != nil)
}

func (r *retrying) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return r.b.retry(ctx, func(ctx context.Context) error { return r.KeyValue.Delete(ctx, key, opts...) })
}

func (r *retrying) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return r.b.retry(ctx, func(ctx context.Context) error { return r.KeyValue.Purge(ctx, key, opts...) })
}

func (r *retrying) Status(ctx context.Context) (st jetstream.KeyValueStatus, err error) {
	err = r.b.retry(ctx, func(ctx context.Context) error { st, err = r.KeyValue.Status(ctx); return err })
	return st, err
}
