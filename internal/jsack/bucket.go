package jsack

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bucket returns kv with Put, PutString, Create and Update writing straight
// to the bucket's stream: the subject and expectation header jetstream's own
// writes send, the ack read by Publish, and the same results and errors.
// Everything else is kv's. kv must be a bucket the caller made without
// mirror or sources (the relay's own buckets are), so its keys' subjects are
// "$KV.<bucket>.<key>"; on a JetStream context with a domain or another API
// prefix, kv is returned as it is.
func Bucket(js jetstream.JetStream, kv jetstream.KeyValue) jetstream.KeyValue {
	if o := js.Options(); o.Domain != "" || o.APIPrefix != "" && o.APIPrefix != jetstream.DefaultAPIPrefix {
		return kv
	}
	return &bucket{KeyValue: kv, nc: js.Conn(), pre: "$KV." + kv.Bucket() + "."}
}

type bucket struct {
	jetstream.KeyValue
	nc  *nats.Conn
	pre string
}

// write publishes value at key: with expect, only if the key's last
// revision is rev (0: none).
func (b *bucket) write(ctx context.Context, key string, value []byte, expect bool, rev uint64) (uint64, error) {
	if !keyValid(key) {
		return 0, jetstream.ErrInvalidKey
	}
	msg := &nats.Msg{Subject: b.pre + key, Data: value}
	if expect {
		msg.Header = nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)}}
	}
	ack, err := Publish(ctx, b.nc, msg)
	return ack.Sequence, err
}

// Put implements jetstream.KeyValue.
func (b *bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return b.write(ctx, key, value, false, 0)
}

// PutString implements jetstream.KeyValue.
func (b *bucket) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return b.write(ctx, key, []byte(value), false, 0)
}

// Update implements jetstream.KeyValue: a write at another revision fails
// with an error matching jetstream.ErrKeyRevisionMismatch (and, as
// jetstream's does, jetstream.ErrKeyExists).
func (b *bucket) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
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
	if len(opts) > 0 {
		return b.KeyValue.Create(ctx, key, value, opts...)
	}
	rev, err := b.write(ctx, key, value, true, 0)
	if err != nil && wrongLastSequence(err) {
		return b.KeyValue.Create(ctx, key, value)
	}
	return rev, err
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
