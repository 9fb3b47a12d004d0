package session

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/internal/jsack"
)

// bucket is a key-value bucket whose writes go straight to its stream: the
// same subject and expectation header jetstream's Put, Create and Update
// send, with the ack read by jsack instead of encoding/json (most of a
// write's cost on the client). Reads and everything else are the library's.
type bucket struct {
	jetstream.KeyValue
	nc  *nats.Conn
	pre string // the subject prefix of the bucket's keys
}

func newBucket(js jetstream.JetStream, kv jetstream.KeyValue) *bucket {
	return &bucket{KeyValue: kv, nc: js.Conn(), pre: "$KV." + kv.Bucket() + "."}
}

// put writes value at key and returns its revision. With expect set, only if
// the key's last revision is rev (0: the key was never written or has
// expired); otherwise the error is the server's "wrong last sequence" (see
// wrongLastSequence).
func (b *bucket) put(ctx context.Context, key string, value []byte, expect bool, rev uint64) (uint64, error) {
	msg := &nats.Msg{Subject: b.pre + key, Data: value}
	if expect {
		msg.Header = nats.Header{jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(rev, 10)}}
	}
	ack, err := jsack.Publish(ctx, b.nc, msg)
	return ack.Sequence, err
}

// Put implements jetstream.KeyValue.Put with put.
func (b *bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return b.put(ctx, key, value, false, 0)
}

// wrongLastSequence reports whether err is the server refusing a write
// whose expected revision is not the key's (10164 on replicated streams).
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
