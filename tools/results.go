package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/envelope"
)

// ResultBucket is the JetStream object store of tool results too large for
// one bus message, for a bus prefix: "{PREFIX}_TOOLRESULTS", named like the
// tool runner's other buckets.
func ResultBucket(prefix string) string {
	return strings.ToUpper(strings.ReplaceAll(prefix, "-", "_")) + "_TOOLRESULTS"
}

// MetaResultObject is the meta key of a result envelope whose whole reply
// is stored in ResultBucket: {"bucket", "name", "bytes"}. The envelope itself
// carries the start of the text and a note; FetchResult reads the whole.
const MetaResultObject = "result_object"

// fetchResultTimeout bounds FetchResult when its context has no deadline.
const fetchResultTimeout = time.Minute

// FetchResult returns the whole reply of the result envelope e when e says
// it is stored (MetaResultObject), read from the object store of prefix; e
// itself when it carries its whole reply.
func FetchResult(ctx context.Context, js jetstream.JetStream, prefix string, e *envelope.Envelope) (*envelope.Envelope, error) {
	v, ok := e.Meta.Get(MetaResultObject)
	if !ok {
		return e, nil
	}
	m, _ := v.(map[string]any)
	bucket, _ := m["bucket"].(string)
	name, _ := m["name"].(string)
	if bucket != ResultBucket(prefix) || name == "" {
		return nil, fmt.Errorf("result %s: meta %s names %q/%q, not an object of %s", e.ID, MetaResultObject, bucket, name, ResultBucket(prefix))
	}
	if _, ok := ctx.Deadline(); !ok {
		// Without a deadline jetstream bounds each request by its default
		// 5 s, too short for a reply of megabytes read in chunks on a busy
		// server.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fetchResultTimeout)
		defer cancel()
	}
	os, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("result %s: open object store %s: %w", e.ID, bucket, err)
	}
	raw, err := os.GetBytes(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("result %s: read %s from %s: %w", e.ID, name, bucket, err)
	}
	whole, err := envelope.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("result %s: stored reply %s: %w", e.ID, name, err)
	}
	return whole, nil
}
