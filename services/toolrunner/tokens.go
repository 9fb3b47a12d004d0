package toolrunner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/internal/jsack"
	"github.com/relaystation/relay/tools"
)

// TokenBucket returns the OAuth token bucket name for a bus prefix.
func TokenBucket(prefix string) string { return bucketName(prefix, "OAUTH") }

// KVTokens is a tools.TokenStore in a JetStream key-value bucket
// ("<PREFIX>_OAUTH", replicated like the other buckets): key
// tools.GrantKey(server, issuer, principal) holds the grant sealed with
// RELAY_SECRET_KEY. Every tool runner, hooks worker and `relay mcp` command
// on the bus shares it. Safe for concurrent use.
type KVTokens struct {
	kv     jetstream.KeyValue
	sealer *tools.Sealer
}

// OpenTokens creates or opens the token bucket of b.
func OpenTokens(ctx context.Context, b *bus.Bus, sealer *tools.Sealer) (*KVTokens, error) {
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      TokenBucket(b.Prefix()),
		Description: "relay: OAuth grants of remote MCP servers (encrypted)",
		History:     1,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("open token bucket %s: %w", TokenBucket(b.Prefix()), err)
	}
	return &KVTokens{kv: jsack.Bucket(b.JetStream(), kv), sealer: sealer}, nil
}

// Load implements tools.TokenStore.
func (t *KVTokens) Load(ctx context.Context, server, principal string) (*tools.Grant, uint64, error) {
	keys, err := t.keys(ctx, server, principal)
	if err != nil {
		return nil, 0, err
	}
	var best *tools.Grant
	var rev uint64
	for _, k := range keys {
		e, err := t.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read OAuth grant of %s: %w", server, err)
		}
		g, err := t.sealer.Open(k, e.Value())
		if err != nil {
			return nil, 0, fmt.Errorf("OAuth grant of %s: %w", server, err)
		}
		if best == nil || g.Saved.After(best.Saved) {
			best, rev = g, e.Revision()
		}
	}
	if best == nil {
		return nil, 0, tools.ErrNoGrant
	}
	return best, rev, nil
}

func (t *KVTokens) keys(ctx context.Context, server, principal string) ([]string, error) {
	l, err := t.kv.ListKeysFiltered(ctx, tools.GrantKeyFilter(server, principal))
	if err != nil {
		return nil, fmt.Errorf("list OAuth grants of %s: %w", server, err)
	}
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// Save implements tools.TokenStore.
func (t *KVTokens) Save(ctx context.Context, g *tools.Grant, rev uint64) (uint64, error) {
	key := tools.GrantKey(g.Server, g.Issuer, g.Principal)
	sealed, err := t.sealer.Seal(key, g)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		r, err := t.kv.Put(ctx, key, sealed)
		if err != nil {
			return 0, fmt.Errorf("store OAuth grant of %s: %w", g.Server, err)
		}
		return r, nil
	}
	r, err := t.kv.Update(ctx, key, sealed, rev)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, tools.ErrGrantConflict
	}
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return 0, tools.ErrGrantConflict
		}
		return 0, fmt.Errorf("store OAuth grant of %s: %w", g.Server, err)
	}
	return r, nil
}

// Delete implements tools.TokenStore.
func (t *KVTokens) Delete(ctx context.Context, server, principal string) error {
	keys, err := t.keys(ctx, server, principal)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := t.kv.Purge(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("delete OAuth grant of %s: %w", server, err)
		}
	}
	return nil
}

// LinkBucket returns the bucket of used connection links for a bus prefix.
func LinkBucket(prefix string) string { return bucketName(prefix, "OAUTH_LINKS") }

// KVNonces are tools.LinkNonces in a JetStream key-value bucket
// ("<PREFIX>_OAUTH_LINKS", entries expire after the links do), so a link
// opens once whichever console process serves it. Safe for concurrent use.
type KVNonces struct{ kv jetstream.KeyValue }

// OpenLinkNonces creates or opens the used-links bucket of b.
func OpenLinkNonces(ctx context.Context, b *bus.Bus) (*KVNonces, error) {
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      LinkBucket(b.Prefix()),
		Description: "relay: /relay connect links already opened (single use)",
		History:     1,
		TTL:         tools.ConnectLinkTTL + time.Minute,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("open link bucket %s: %w", LinkBucket(b.Prefix()), err)
	}
	return &KVNonces{kv: jsack.Bucket(b.JetStream(), kv)}, nil
}

// Use implements tools.LinkNonces.
func (n *KVNonces) Use(ctx context.Context, nonce string, _ time.Time) error {
	_, err := n.kv.Create(ctx, nonce, []byte{1})
	if errors.Is(err, jetstream.ErrKeyExists) {
		return tools.ErrLinkUsed
	}
	if err != nil {
		return fmt.Errorf("record the connection link: %w", err)
	}
	return nil
}

// Principals implements tools.PrincipalLister.
func (t *KVTokens) Principals(ctx context.Context, server string) ([]string, error) {
	l, err := t.kv.ListKeysFiltered(ctx, tools.GrantServerFilter(server))
	if err != nil {
		return nil, fmt.Errorf("list OAuth grants of %s: %w", server, err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return tools.PrincipalsOfKeys(keys), nil
}
