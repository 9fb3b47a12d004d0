package toolrunner

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/tools"
)

// KVRounds is the tools.RoundStore of the tool runners on a bus: the
// JetStream key-value bucket "<PREFIX>_TOOLROUNDS" (replicated like every
// bucket, RELAY_STREAM_REPLICAS), key "r.<base64url of the call id>", value the JSON tools.Round. A round lives until its call
// completes, at most the bucket's TTL (the call record's, 24h by default).
type KVRounds struct{ kv jetstream.KeyValue }

// RoundBucket returns the name of the round bucket for a bus prefix.
func RoundBucket(prefix string) string { return bucketName(prefix, "TOOLROUNDS") }

// OpenRounds creates or opens the round bucket of b; ttl 0 keeps rounds for ever.
func OpenRounds(ctx context.Context, b *bus.Bus, ttl time.Duration) (*KVRounds, error) {
	kv, err := b.OpenBucket(ctx, RoundBucket(b.Prefix()), "relay tool runner: pending input-required rounds of tool calls (MCP 2026-07-28), resumed after a restart", ttl)
	if err != nil {
		return nil, err
	}
	return &KVRounds{kv: kv}, nil
}

func roundKey(callID string) string {
	return "r." + base64.RawURLEncoding.EncodeToString([]byte(callID))
}

// LoadRound implements tools.RoundStore.
func (k *KVRounds) LoadRound(ctx context.Context, callID string) (*tools.Round, error) {
	e, err := k.kv.Get(ctx, roundKey(callID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read round of call %s: %w", callID, err)
	}
	var r tools.Round
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("round of call %s: %w", callID, err)
	}
	return &r, nil
}

// SaveRound implements tools.RoundStore.
func (k *KVRounds) SaveRound(ctx context.Context, r *tools.Round) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := k.kv.Put(ctx, roundKey(r.CallID), b); err != nil {
		return fmt.Errorf("store round %d of call %s: %w", r.N, r.CallID, err)
	}
	return nil
}

// DeleteRound implements tools.RoundStore.
func (k *KVRounds) DeleteRound(ctx context.Context, callID string) error {
	if err := k.kv.Delete(ctx, roundKey(callID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete round of call %s: %w", callID, err)
	}
	return nil
}

// pending reports whether call id has a stored round.
func (k *KVRounds) pending(ctx context.Context, callID string) (bool, error) {
	r, err := k.LoadRound(ctx, callID)
	return r != nil, err
}
