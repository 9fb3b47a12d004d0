package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/envelope"
)

// Stream kinds. Every relative subject belongs to exactly one of them, by its
// first token.
const (
	streamIn   = "IN"
	streamWork = "WORK"
	streamDLQ  = "DLQ"
)

// workRoots are the first tokens of subjects kept in the work stream: agent
// steps, tool calls and results, outbound posts, approvals, hooks, memory,
// system notices and audit records.
var workRoots = []string{"agent", "tool", "out", "approval", "hook", "memory", "system", "audit", "task"}

// WorkRoots returns the first tokens of the subjects the work stream keeps.
func WorkRoots() []string { return append([]string(nil), workRoots...) }

// StreamName returns the JetStream stream holding a relative subject, or ""
// when no relay stream covers it.
func (b *Bus) StreamName(rel string) string {
	root, _, _ := strings.Cut(rel, ".")
	switch root {
	case envelope.SubjectInbound:
		return b.streamName(streamIn)
	case envelope.SubjectDLQ:
		return b.streamName(streamDLQ)
	}
	for _, r := range workRoots {
		if root == r {
			return b.streamName(streamWork)
		}
	}
	return ""
}

func (b *Bus) streamName(kind string) string {
	switch kind {
	case streamIn:
		return b.names.in
	case streamDLQ:
		return b.names.dlq
	}
	return b.names.work
}

// streamNames are the prefix's stream names, fixed at Connect.
type streamNames struct{ in, work, dlq string }

func newStreamNames(prefix string) streamNames {
	p := strings.ToUpper(strings.ReplaceAll(prefix, "-", "_")) + "_"
	return streamNames{in: p + streamIn, work: p + streamWork, dlq: p + streamDLQ}
}

func (b *Bus) streams() []jetstream.StreamConfig {
	p := b.cfg.Prefix
	work := make([]string, len(workRoots))
	for i, r := range workRoots {
		work[i] = p + "." + r + ".>"
	}
	return []jetstream.StreamConfig{
		// Limits retention: every worker type has its own durable consumer and
		// reads every inbound envelope; messages age out, they are not removed
		// by one consumer's ack.
		b.stream(streamIn, "relay inbound envelopes (relay.in.{channel}.{event})",
			[]string{p + ".in.>"}, b.cfg.Retention),
		b.stream(streamWork, "relay work: agent steps, tool calls and results, outbound, approvals, system notices, audit",
			work, b.cfg.Retention),
		b.stream(streamDLQ, "relay dead letters: original envelope, reason, delivery count, subject",
			[]string{p + ".dlq.>"}, b.cfg.DeadLetterRetention),
	}
}

// stream is the configuration every relay stream shares: file storage,
// limits retention with the oldest messages discarded, the bus's duplicate
// window and replica count.
func (b *Bus) stream(kind, desc string, subjects []string, maxAge time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        b.streamName(kind),
		Description: desc,
		Subjects:    subjects,
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      maxAge,
		Duplicates:  b.cfg.DuplicateWindow,
		Discard:     jetstream.DiscardOld,
		Replicas:    b.cfg.Replicas,
	}
}

// ensureStreams creates the relay's streams, or updates one whose settings
// differ from the bus's; running it again is a no-op that changes nothing on
// the server. (Updating a stream that already has these settings is not
// harmless: nats-server 2.15 rewrites its store config then, racing with
// consumers being created on it.)
//
// It waits (Ensure) while JetStream does not answer: a restarted server
// replaying its store, a cluster electing leaders. It returns only when ctx
// ends or for a setting the server refuses.
func (b *Bus) ensureStreams(ctx context.Context) error {
	for _, sc := range b.streams() {
		if err := b.Ensure(ctx, "stream "+sc.Name, func(ctx context.Context) error { return b.ensureStream(ctx, sc) }); err != nil {
			return err
		}
	}
	return nil
}

func (b *Bus) ensureStream(ctx context.Context, sc jetstream.StreamConfig) error {
	s, err := b.js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = b.js.(replicated).JetStream.CreateStream(ctx, sc); err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create stream %s: %w", sc.Name, err)
		}
		s, err = b.js.Stream(ctx, sc.Name) // another process created it first
	}
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", sc.Name, err)
	}
	if sameStream(s.CachedInfo().Config, sc) {
		return nil
	}
	if _, err := b.js.(replicated).JetStream.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("update stream %s: %w", sc.Name, err)
	}
	return nil
}

// sameStream reports whether a stream on the server has the settings the
// bus asks for (those it sets; the server fills in the rest).
func sameStream(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) &&
		have.Description == want.Description &&
		have.Retention == want.Retention &&
		have.Storage == want.Storage &&
		have.MaxAge == want.MaxAge &&
		have.Duplicates == want.Duplicates &&
		have.Discard == want.Discard &&
		have.Replicas == max(want.Replicas, 1)
}

// DeleteStreams removes the relay's streams and everything in them. Tests use it
// to clean a shared server; operators almost never want it.
func (b *Bus) DeleteStreams(ctx context.Context) error {
	ctx, cancel := b.withTimeout(ctx)
	defer cancel()
	for _, sc := range b.streams() {
		if err := b.js.DeleteStream(ctx, sc.Name); err != nil && err != jetstream.ErrStreamNotFound {
			return fmt.Errorf("delete stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// replicated is the bus's JetStream context: streams, key-value buckets and
// object stores created through it without a replica count get the bus's
// (Config.Replicas), so every service's buckets follow RELAY_STREAM_REPLICAS.
//
// Creating or updating one waits while JetStream is slow or has no leader
// (Bus.Ensure): only ctx's end or a configuration the server refuses ends
// the wait, and Ready names the stream or bucket meanwhile.
type replicated struct {
	jetstream.JetStream
	b *Bus
}

// ensure runs op until it succeeds (Bus.Ensure) and returns its result.
func ensure[T any](ctx context.Context, b *Bus, what string, op func(ctx context.Context) (T, error)) (T, error) {
	var v T
	err := b.Ensure(ctx, what, func(ctx context.Context) error {
		var err error
		v, err = op(ctx)
		return err
	})
	return v, err
}

func (r replicated) CreateStream(ctx context.Context, c jetstream.StreamConfig) (jetstream.Stream, error) {
	c.Replicas = cmp.Or(c.Replicas, r.b.cfg.Replicas)
	return ensure(ctx, r.b, "stream "+c.Name, func(ctx context.Context) (jetstream.Stream, error) { return r.JetStream.CreateStream(ctx, c) })
}

func (r replicated) UpdateStream(ctx context.Context, c jetstream.StreamConfig) (jetstream.Stream, error) {
	c.Replicas = cmp.Or(c.Replicas, r.b.cfg.Replicas)
	return ensure(ctx, r.b, "stream "+c.Name, func(ctx context.Context) (jetstream.Stream, error) { return r.JetStream.UpdateStream(ctx, c) })
}

func (r replicated) CreateOrUpdateStream(ctx context.Context, c jetstream.StreamConfig) (jetstream.Stream, error) {
	c.Replicas = cmp.Or(c.Replicas, r.b.cfg.Replicas)
	return ensure(ctx, r.b, "stream "+c.Name, func(ctx context.Context) (jetstream.Stream, error) { return r.JetStream.CreateOrUpdateStream(ctx, c) })
}

func (r replicated) CreateKeyValue(ctx context.Context, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	c.Replicas = cmp.Or(c.Replicas, r.b.cfg.Replicas)
	return ensure(ctx, r.b, "bucket "+c.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) { return r.JetStream.CreateKeyValue(ctx, c) })
}

func (r replicated) UpdateKeyValue(ctx context.Context, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	c.Replicas = cmp.Or(c.Replicas, r.b.cfg.Replicas)
	return ensure(ctx, r.b, "bucket "+c.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) { return r.JetStream.UpdateKeyValue(ctx, c) })
}

// CreateOrUpdateKeyValue leaves a bucket that already has the asked-for
// settings alone, as ensureStreams does streams: every service opens its
// buckets at start, and a needless update races in nats-server 2.15 with
// watchers being created on the bucket.
func (r replicated) CreateOrUpdateKeyValue(ctx context.Context, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	c.Replicas = cmp.Or(c.Replicas, r.b.cfg.Replicas)
	return ensure(ctx, r.b, "bucket "+c.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		kv, err := r.JetStream.KeyValue(ctx, c.Bucket)
		if err == nil {
			var st jetstream.KeyValueStatus
			if st, err = kv.Status(ctx); err == nil && sameBucket(st, c) {
				return kv, nil
			}
		}
		if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) && Transient(err) {
			return nil, err // no leader: an update now would time out too
		}
		return r.JetStream.CreateOrUpdateKeyValue(ctx, c)
	})
}

// sameBucket reports whether a bucket has the settings c asks for (those
// the relay's services set).
func sameBucket(st jetstream.KeyValueStatus, c jetstream.KeyValueConfig) bool {
	kst, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return false
	}
	have := kst.StreamInfo().Config
	return st.TTL() == c.TTL &&
		st.History() == int64(max(c.History, 1)) &&
		have.Replicas == max(c.Replicas, 1) &&
		have.MaxBytes == cmp.Or(c.MaxBytes, -1) &&
		have.MaxMsgSize == cmp.Or(c.MaxValueSize, -1) &&
		have.Description == c.Description &&
		have.Storage == c.Storage
}

func (r replicated) CreateObjectStore(ctx context.Context, c jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	c.Replicas = cmp.Or(c.Replicas, r.b.cfg.Replicas)
	return ensure(ctx, r.b, "object store "+c.Bucket, func(ctx context.Context) (jetstream.ObjectStore, error) { return r.JetStream.CreateObjectStore(ctx, c) })
}

func (r replicated) CreateOrUpdateObjectStore(ctx context.Context, c jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	c.Replicas = cmp.Or(c.Replicas, r.b.cfg.Replicas)
	return ensure(ctx, r.b, "object store "+c.Bucket, func(ctx context.Context) (jetstream.ObjectStore, error) {
		return r.JetStream.CreateOrUpdateObjectStore(ctx, c)
	})
}
