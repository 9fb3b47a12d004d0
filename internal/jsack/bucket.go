package jsack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bucket returns kv with two changes.
//
// Each request (Get, GetRevision, Put, PutString, Create, Update, Delete,
// Purge, Status) waits for its reply at most js's default timeout
// (jetstream.WithDefaultTimeout, 5s unless set), or until the caller's
// deadline when that is earlier. jetstream waits until the caller's
// deadline whenever there is one, and nats.go does not fail the requests in
// flight when its connection drops: a request sent just before a server
// stopped then holds its caller, and a handler's delivery with it, for all
// of a long deadline (a minute for a handler) after the server is back.
//
// Put, PutString, Create and Update write straight to the bucket's stream:
// the subject and expectation header jetstream's own writes send, the ack
// read by Publish, and the same results and errors. kv must be a bucket the
// caller made without mirror or sources (the relay's own buckets are), so
// its keys' subjects are "$KV.<bucket>.<key>"; on a JetStream context with a
// domain or another API prefix, jetstream's writes are used instead.
//
// Watches and key listings are kv's, on the caller's context.
func Bucket(js jetstream.JetStream, kv jetstream.KeyValue) jetstream.KeyValue {
	o := js.Options()
	b := &bucket{KeyValue: kv, timeout: cmp.Or(o.DefaultTimeout, DefaultTimeout)}
	if o.Domain == "" && (o.APIPrefix == "" || o.APIPrefix == jetstream.DefaultAPIPrefix) {
		b.nc, b.pre = js.Conn(), "$KV."+kv.Bucket()+"."
	}
	return b
}

type bucket struct {
	jetstream.KeyValue
	timeout time.Duration
	nc      *nats.Conn // nil: writes go through jetstream
	pre     string
}

// Bound returns ctx limited to timeout from now, or ctx itself when its
// deadline is no later than that (then the returned cancel does nothing).
func Bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// write publishes value at key straight to the bucket's stream: with
// expect, only if the key's last revision is rev (0: none).
func (b *bucket) write(ctx context.Context, key string, value []byte, expect bool, rev uint64) (uint64, error) {
	if !keyValid(key) {
		return 0, jetstream.ErrInvalidKey
	}
	msg := &nats.Msg{Subject: b.pre + key, Data: value}
	if expect {
		msg.Header = nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)}}
	}
	ctx, cancel := Bound(ctx, b.timeout)
	defer cancel()
	ack, err := Publish(ctx, b.nc, msg)
	return ack.Sequence, err
}

// Put implements jetstream.KeyValue.
func (b *bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if b.nc == nil {
		ctx, cancel := Bound(ctx, b.timeout)
		defer cancel()
		return b.KeyValue.Put(ctx, key, value)
	}
	return b.write(ctx, key, value, false, 0)
}

// PutString implements jetstream.KeyValue.
func (b *bucket) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return b.Put(ctx, key, []byte(value))
}

// Update implements jetstream.KeyValue: a write at another revision fails
// with an error matching jetstream.ErrKeyRevisionMismatch (and, as
// jetstream's does, jetstream.ErrKeyExists).
func (b *bucket) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	if b.nc == nil {
		ctx, cancel := Bound(ctx, b.timeout)
		defer cancel()
		return b.KeyValue.Update(ctx, key, value, revision)
	}
	rev, err := b.write(ctx, key, value, true, revision)
	if err != nil && wrongLastSequence(err) {
		return 0, fmt.Errorf("%w: %w", err, jetstream.ErrKeyRevisionMismatch)
	}
	return rev, err
}

// Create implements jetstream.KeyValue. The usual create, of a key that was
// never written or has expired, is one write; when the key has an entry (a
// value, or a delete or purge marker that Create may write over) or a TTL
// is asked for, jetstream's Create decides, with its errors.
func (b *bucket) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if b.nc != nil && len(opts) == 0 {
		rev, err := b.write(ctx, key, value, true, 0)
		if err == nil || !wrongLastSequence(err) {
			return rev, err
		}
	}
	ctx, cancel := Bound(ctx, b.timeout)
	defer cancel()
	return b.KeyValue.Create(ctx, key, value, opts...)
}

// Get implements jetstream.KeyValue.
func (b *bucket) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ctx, cancel := Bound(ctx, b.timeout)
	defer cancel()
	return b.KeyValue.Get(ctx, key)
}

// GetRevision implements jetstream.KeyValue.
func (b *bucket) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	ctx, cancel := Bound(ctx, b.timeout)
	defer cancel()
	return b.KeyValue.GetRevision(ctx, key, revision)
}

// Delete implements jetstream.KeyValue.
func (b *bucket) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, cancel := Bound(ctx, b.timeout)
	defer cancel()
	return b.KeyValue.Delete(ctx, key, opts...)
}

// Purge implements jetstream.KeyValue.
func (b *bucket) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, cancel := Bound(ctx, b.timeout)
	defer cancel()
	return b.KeyValue.Purge(ctx, key, opts...)
}

// Status implements jetstream.KeyValue.
func (b *bucket) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	ctx, cancel := Bound(ctx, b.timeout)
	defer cancel()
	return b.KeyValue.Status(ctx)
}

// wrongLastSequence reports whether err is the server refusing a write
// whose expected last sequence was not the subject's (10164 on replicated
// streams).
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// keyValid is jetstream's rule for keys: [-/_=.a-zA-Z0-9]+, no leading,
// trailing or double dot.
func keyValid(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '/', c == '_', c == '=', c == '.':
		default:
			return false
		}
	}
	return true
}
