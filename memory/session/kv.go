package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KVConfig configures the JetStream key-value store.
type KVConfig struct {
	// Bucket holds sessions; its max age is Options.TTL, so a session expires
	// TTL after its last write. Default "relay_sessions".
	Bucket string
	// EpisodeBucket holds episodes; its max age is Options.MaxEpisodeTTL.
	// Default Bucket + "_episodes".
	EpisodeBucket string
	Options
}

// KV keeps sessions in JetStream key-value buckets, one key per thread (the
// thread key base64url-encoded, since KV keys allow few characters). Updates
// use optimistic concurrency on the key's revision and retry on conflict.
type KV struct {
	sessions jetstream.KeyValue
	episodes jetstream.KeyValue
	opt      Options
}

type kvSession struct {
	Summary string   `json:"summary,omitempty"`
	Turns   []Turn   `json:"turns"`
	Seen    []string `json:"seen"`
}

// NewKV creates or updates the buckets on js.
func NewKV(ctx context.Context, js jetstream.JetStream, cfg KVConfig) (*KV, error) {
	cfg.setDefaults()
	if cfg.Bucket == "" {
		cfg.Bucket = "relay_sessions"
	}
	if cfg.EpisodeBucket == "" {
		cfg.EpisodeBucket = cfg.Bucket + "_episodes"
	}
	s, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Bucket, Description: "relay sessions: recent turns and summary per thread",
		History: 1, TTL: cfg.TTL, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("session bucket %s: %w", cfg.Bucket, err)
	}
	e, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.EpisodeBucket, Description: "relay episodic memories per thread",
		History: 1, TTL: cfg.MaxEpisodeTTL, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("episode bucket %s: %w", cfg.EpisodeBucket, err)
	}
	return &KV{sessions: s, episodes: e, opt: cfg.Options}, nil
}

// Close is a no-op: the buckets live on the caller's connection.
func (k *KV) Close() error { return nil }

func kvKey(thread string) string { return "t." + base64.RawURLEncoding.EncodeToString([]byte(thread)) }

const maxCASRetries = 50

// read decodes the JSON value of key into v and returns its revision: 0,
// with v untouched, when the key does not exist.
func read(ctx context.Context, kv jetstream.KeyValue, key string, v any) (uint64, error) {
	entry, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(entry.Value(), v); err != nil {
		return 0, fmt.Errorf("decode %s: %w", key, err)
	}
	return entry.Revision(), nil
}

// update reads the key, applies fn and writes it back with the read revision,
// retrying on conflicts. fn returns false to write nothing.
func update[T any](ctx context.Context, kv jetstream.KeyValue, key string, fn func(v *T) (bool, error)) error {
	for range maxCASRetries {
		var v T
		rev, err := read(ctx, kv, key, &v)
		if err != nil {
			return err
		}
		write, err := fn(&v)
		if err != nil || !write {
			return err
		}
		b, err := json.Marshal(&v)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, b)
		} else {
			_, err = kv.Update(ctx, key, b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		return err
	}
	return fmt.Errorf("update %s: too many concurrent writers", key)
}

// Append implements Store.
func (k *KV) Append(ctx context.Context, thread string, t Turn) (bool, error) {
	if thread == "" {
		return false, ErrNoThread
	}
	var added bool
	err := update(ctx, k.sessions, kvKey(thread), func(s *kvSession) (bool, error) {
		added = false
		if slices.Contains(s.Seen, t.ID) {
			return false, nil
		}
		added = true
		s.Turns = append(s.Turns, t)
		if n := len(s.Turns) - k.opt.MaxTurns; n > 0 {
			s.Turns = slices.Delete(s.Turns, 0, n)
		}
		s.Seen = append(s.Seen, t.ID)
		if n := len(s.Seen) - k.opt.MaxSeen; n > 0 {
			s.Seen = slices.Delete(s.Seen, 0, n)
		}
		return true, nil
	})
	if err != nil {
		return false, fmt.Errorf("append turn %s to session %s: %w", t.ID, thread, err)
	}
	return added, nil
}

// Load implements Store.
func (k *KV) Load(ctx context.Context, thread string) (Session, error) {
	s := Session{Thread: thread}
	if thread == "" {
		return s, ErrNoThread
	}
	var v kvSession
	if _, err := read(ctx, k.sessions, kvKey(thread), &v); err != nil {
		return s, fmt.Errorf("load session %s: %w", thread, err)
	}
	s.Summary, s.Turns = v.Summary, v.Turns
	return s, nil
}

// Fold implements Store.
func (k *KV) Fold(ctx context.Context, thread string, n int, lastID, summary string) (bool, error) {
	if thread == "" {
		return false, ErrNoThread
	}
	var folded bool
	err := update(ctx, k.sessions, kvKey(thread), func(s *kvSession) (bool, error) {
		folded = n > 0 && n <= len(s.Turns) && s.Turns[n-1].ID == lastID
		if !folded {
			return false, nil
		}
		s.Turns = slices.Delete(s.Turns, 0, n)
		s.Summary = summary
		return true, nil
	})
	if err != nil {
		return false, fmt.Errorf("fold %d turns of session %s: %w", n, thread, err)
	}
	return folded, nil
}

// PutEpisode implements Store.
func (k *KV) PutEpisode(ctx context.Context, thread string, e Episode) error {
	if thread == "" {
		return ErrNoThread
	}
	now := time.Now()
	clampExpiry(&e, now, k.opt.MaxEpisodeTTL)
	err := update(ctx, k.episodes, kvKey(thread), func(list *[]Episode) (bool, error) {
		out := (*list)[:0]
		for _, old := range *list {
			if old.ID != e.ID && old.Expires.After(now) {
				out = append(out, old)
			}
		}
		*list = append(out, e)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("put episode %s of %s: %w", e.ID, thread, err)
	}
	return nil
}

// Episodes implements Store.
func (k *KV) Episodes(ctx context.Context, thread string) ([]Episode, error) {
	if thread == "" {
		return nil, ErrNoThread
	}
	var list []Episode
	if _, err := read(ctx, k.episodes, kvKey(thread), &list); err != nil {
		return nil, fmt.Errorf("episodes of %s: %w", thread, err)
	}
	now := time.Now()
	out := list[:0]
	for _, e := range list {
		if e.Expires.After(now) {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	sortEpisodes(out)
	return out, nil
}

// Forget implements Store.
func (k *KV) Forget(ctx context.Context, thread string) error {
	if thread == "" {
		return ErrNoThread
	}
	for _, kv := range []jetstream.KeyValue{k.sessions, k.episodes} {
		if err := kv.Purge(ctx, kvKey(thread)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("forget session %s: %w", thread, err)
		}
	}
	return nil
}

func sortEpisodes(es []Episode) {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Created.Before(es[j].Created) })
}
