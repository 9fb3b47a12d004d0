package session

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/jsack"
)

// KVConfig configures the JetStream key-value store.
type KVConfig struct {
	// Bucket holds sessions; its max age is Options.TTL, so a session expires
	// TTL after its last write. Default "relay_sessions".
	Bucket string
	// EpisodeBucket holds episodes; its max age is Options.MaxEpisodeTTL.
	// Default Bucket + "_episodes".
	EpisodeBucket string
	// IDBucket holds the ids of turns that left a session, for idempotency;
	// each expires IDWindow after it was written. Default Bucket + "_ids".
	IDBucket string
	// IDWindow is how long a turn that left its session is still recognised
	// as a duplicate: it covers JetStream's redeliveries (minutes) and bounds
	// the keys a hot thread leaves behind (one per turn). Default
	// DefaultIDWindow, at most Options.TTL.
	IDWindow time.Duration
	Options
}

// DefaultIDWindow is KVConfig.IDWindow's default.
const DefaultIDWindow = 15 * time.Minute

// KV keeps sessions in JetStream key-value buckets, one key per thread (the
// thread key base64url-encoded, since KV keys allow few characters). Updates
// use optimistic concurrency on the key's revision and retry on conflict.
//
// The session value holds only the summary and the kept turns, so a write
// costs in proportion to the session's recent text, not its history. The ids
// of turns that left the session (folded or beyond MaxTurns) are remembered
// for idempotency by one small key each ("i." and a hash of thread and id) in
// the id bucket, written before the session write that removes the turn and
// expiring IDWindow later, so a hot thread leaves a bounded number behind.
//
// A KV keeps the last session it read or wrote for each thread, with its
// revision, and writes against that revision without reading again; a
// conflict (another process wrote) reads the key and retries. Serialising the
// writes of one thread in one process (the memory worker does) leaves one
// write, no read and no decode per turn. An append to a thread it has not
// cached takes the session to be new: one create, and no id key read (see
// unseen), unless the create finds the session there. While a KV is the only
// writer of a session it created, it remembers which turns left it (owned),
// so its appends read no id key either.
type KV struct {
	sessions jetstream.KeyValue
	episodes jetstream.KeyValue
	ids      jetstream.KeyValue
	opt      Options
	idWindow time.Duration

	mu    sync.Mutex
	cache map[string]cachedSession

	stats struct {
		reads, decodes, encodes, writes, conflicts, markerReads, markerWrites, guesses, misses atomic.Uint64
	}
}

// cachedSession is a session as last read or written; its value is never
// changed in place (writers copy it).
type cachedSession struct {
	rev uint64
	v   *kvSession
	own *owned // set while every write of the session was this KV's
}

// maxCached bounds the sessions a KV keeps decoded.
const maxCached = 4096

type kvSession struct {
	Summary string `json:"summary,omitempty"`
	Turns   []Turn `json:"turns"`
	// Seen is the id list of older versions, which kept every appended id in
	// the value; it is turned into id keys on the next write and dropped.
	Seen []string `json:"seen,omitempty"`
}

// KVStats counts a KV's work since it was made: session reads (Get), value
// decodes and encodes, session writes, writes lost to a concurrent writer,
// the reads and writes of id keys, appends that took a session it had not
// cached to be new without reading it (Guesses), and those of them whose
// create found the session there (Misses, not counted as Conflicts).
type KVStats struct {
	Reads, Decodes, Encodes, Writes, Conflicts, MarkerReads, MarkerWrites, Guesses, Misses uint64
}

// Stats returns the counters; safe for concurrent use.
func (k *KV) Stats() KVStats {
	return KVStats{
		Reads: k.stats.reads.Load(), Decodes: k.stats.decodes.Load(), Encodes: k.stats.encodes.Load(),
		Writes: k.stats.writes.Load(), Conflicts: k.stats.conflicts.Load(),
		MarkerReads: k.stats.markerReads.Load(), MarkerWrites: k.stats.markerWrites.Load(),
		Guesses: k.stats.guesses.Load(), Misses: k.stats.misses.Load(),
	}
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
	if cfg.IDBucket == "" {
		cfg.IDBucket = cfg.Bucket + "_ids"
	}
	if cfg.IDWindow <= 0 {
		cfg.IDWindow = DefaultIDWindow
	}
	if cfg.TTL > 0 {
		cfg.IDWindow = min(cfg.IDWindow, cfg.TTL)
	}
	ids, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.IDBucket, Description: "relay session turn ids that left their session (idempotency)",
		History: 1, TTL: cfg.IDWindow, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("session id bucket %s: %w", cfg.IDBucket, err)
	}
	// The writes go straight to the buckets' streams (jsack.Bucket): decoding
	// each write's ack with encoding/json was most of its cost here.
	return &KV{sessions: jsack.Bucket(js, s), episodes: jsack.Bucket(js, e), ids: jsack.Bucket(js, ids), opt: cfg.Options, idWindow: cfg.IDWindow, cache: map[string]cachedSession{}}, nil
}

// Close is a no-op: the buckets live on the caller's connection.
func (k *KV) Close() error { return nil }

func kvKey(thread string) string { return "t." + base64.RawURLEncoding.EncodeToString([]byte(thread)) }

// markerKey is the key that remembers that the turn id of thread was appended
// and has left the session. It is a hash, so it names neither.
func markerKey(thread, id string) string {
	h := sha256.Sum256([]byte(thread + "\n" + id))
	return "i." + hex.EncodeToString(h[:16])
}

const maxCASRetries = 50

// casBackoff waits before the next try after the attempt-th lost
// compare-and-swap: a random delay up to 100µs·2^attempt, capped at 20ms, so
// writers that keep colliding spread out instead of starving one another
// (without it, a slow writer on a loaded machine could lose 50 rounds in a row).
func casBackoff(ctx context.Context, attempt int) error {
	limit := min(100*time.Microsecond<<min(attempt, 8), 20*time.Millisecond)
	t := time.NewTimer(rand.N(limit) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

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

// write stores b at key if its revision is still rev (0: if it does not
// exist). It reports false when another writer got in first.
func write(ctx context.Context, kv jetstream.KeyValue, key string, b []byte, rev uint64) (uint64, bool, error) {
	var err error
	var next uint64
	if rev == 0 {
		next, err = kv.Create(ctx, key, b)
	} else {
		next, err = kv.Update(ctx, key, b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, false, nil
	}
	return next, err == nil, err
}

// update reads the key, applies fn and writes it back with the read revision,
// retrying on conflicts. fn returns false to write nothing.
func update[T any](ctx context.Context, kv jetstream.KeyValue, key string, fn func(v *T) (bool, error)) error {
	for attempt := range maxCASRetries {
		if attempt > 0 {
			if err := casBackoff(ctx, attempt); err != nil {
				return err
			}
		}
		var v T
		rev, err := read(ctx, kv, key, &v)
		if err != nil {
			return err
		}
		ok, err := fn(&v)
		if err != nil || !ok {
			return err
		}
		b, err := json.Marshal(&v)
		if err != nil {
			return err
		}
		if _, ok, err := write(ctx, kv, key, b, rev); ok || err != nil {
			return err
		}
	}
	return fmt.Errorf("update %s: too many concurrent writers", key)
}

// session returns the thread's session and its revision: the cached one, or,
// when there is none or fresh is set, the one in the bucket. With guess set
// and nothing cached, it reads nothing and returns an empty session with
// revision 0: the write computed from it creates the key, and fails, to be
// retried with fresh set, if the key exists.
func (k *KV) session(ctx context.Context, key string, fresh, guess bool) (cachedSession, error) {
	if !fresh {
		k.mu.Lock()
		c, ok := k.cache[key]
		k.mu.Unlock()
		if ok {
			return c, nil
		}
		if guess {
			k.stats.guesses.Add(1)
			return cachedSession{v: &kvSession{}}, nil
		}
	}
	k.stats.reads.Add(1)
	entry, err := k.sessions.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		k.remember(key, &kvSession{}, 0, nil)
		return cachedSession{v: &kvSession{}}, nil
	}
	if err != nil {
		return cachedSession{}, err
	}
	k.stats.decodes.Add(1)
	var v kvSession
	if err := json.Unmarshal(entry.Value(), &v); err != nil {
		return cachedSession{}, fmt.Errorf("decode %s: %w", key, err)
	}
	k.remember(key, &v, entry.Revision(), nil)
	return cachedSession{rev: entry.Revision(), v: &v}, nil
}

// remember caches v as the session at key with revision rev; own is what
// the KV knows of it as its only writer, or nil.
func (k *KV) remember(key string, v *kvSession, rev uint64, own *owned) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.cache[key]; !ok && len(k.cache) >= maxCached {
		for old := range k.cache { // any one: the map's order is random
			delete(k.cache, old)
			break
		}
	}
	k.cache[key] = cachedSession{rev: rev, v: v, own: own}
}

func (k *KV) forgetCached(key string) {
	k.mu.Lock()
	delete(k.cache, key)
	k.mu.Unlock()
}

// change computes the next session from the current one, cur.v at revision
// cur.rev (0: the write creates the session; cur.own: set while every write
// of it was this KV's); it returns nil to write nothing, and the ids of the
// turns the next session no longer holds.
type change func(cur cachedSession) (next *kvSession, removed []string, err error)

// modify applies fn to the thread's session and writes the result against
// the revision it was computed from, retrying with a fresh read when another
// writer got in first. Ids of removed turns get their keys before the write.
//
// With guess set, a session that is not cached is taken to be new without
// reading it (appends: most threads a worker has not seen are new ones), so
// creating a session costs one write; when the guess is wrong the create
// fails and the next attempt reads the session at once, without a backoff.
func (k *KV) modify(ctx context.Context, thread string, guess bool, fn change) error {
	key := kvKey(thread)
	fresh, wait := false, 0
	for range maxCASRetries {
		if wait > 0 {
			if err := casBackoff(ctx, wait); err != nil {
				return err
			}
		}
		cur, err := k.session(ctx, key, fresh, guess)
		if err != nil {
			return err
		}
		rev := cur.rev
		next, removed, err := fn(cur)
		if err != nil || next == nil {
			return err
		}
		removed = append(removed, legacySeen(cur.v, next)...)
		next.Seen = nil
		if err := k.mark(ctx, thread, removed); err != nil {
			return err
		}
		k.stats.encodes.Add(1)
		b, err := next.appendJSON(make([]byte, 0, 256+next.size()))
		if err != nil {
			return err
		}
		k.stats.writes.Add(1)
		nrev, ok, err := write(ctx, k.sessions, key, b, rev)
		if err != nil {
			k.forgetCached(key)
			return err
		}
		if !ok {
			if guess && rev == 0 && !fresh {
				// The guess was wrong: the session exists, read it.
				k.stats.misses.Add(1)
			} else {
				k.stats.conflicts.Add(1)
				wait++
			}
			fresh = true
			continue
		}
		own := cur.own // this KV wrote the revision it just replaced
		if rev == 0 {
			own = newOwned(k.idWindow) // it created the session
		}
		if own != nil {
			own.left(time.Now(), removed)
		}
		k.remember(key, next, nrev, own)
		return nil
	}
	k.forgetCached(key)
	return fmt.Errorf("update %s: too many concurrent writers", key)
}

// legacySeen returns the ids an old-format value remembered that next does
// not hold as turns: they become id keys.
func legacySeen(cur, next *kvSession) []string {
	var out []string
	for _, id := range cur.Seen {
		if !slices.ContainsFunc(next.Turns, func(t Turn) bool { return t.ID == id }) {
			out = append(out, id)
		}
	}
	return out
}

// mark writes the id keys of ids, concurrently when there are several.
func (k *KV) mark(ctx context.Context, thread string, ids []string) error {
	put := func(ctx context.Context, id string) error {
		k.stats.markerWrites.Add(1)
		if _, err := k.ids.Put(ctx, markerKey(thread, id), []byte{'1'}); err != nil {
			return fmt.Errorf("remember turn id %s: %w", id, err)
		}
		return nil
	}
	switch len(ids) {
	case 0:
		return nil
	case 1:
		return put(ctx, ids[0])
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, id := range ids {
		g.Go(func() error { return put(gctx, id) })
	}
	return g.Wait()
}

// marked reports whether id has a key: it was appended and has left the session.
func (k *KV) marked(ctx context.Context, thread, id string) (bool, error) {
	k.stats.markerReads.Add(1)
	_, err := k.ids.Get(ctx, markerKey(thread, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

func hasTurn(s *kvSession, id string) bool {
	return slices.ContainsFunc(s.Turns, func(t Turn) bool { return t.ID == id }) || slices.Contains(s.Seen, id)
}

// Append implements Store.
func (k *KV) Append(ctx context.Context, thread string, t Turn) (bool, error) {
	return appendOne(ctx, k, thread, t)
}

// AppendFold implements Store: one write for all of ts and the fold.
func (k *KV) AppendFold(ctx context.Context, thread string, f Folder, ts ...Turn) ([]bool, error) {
	added, done, err := startAppend(thread, ts)
	if done {
		return added, err
	}
	err = k.modify(ctx, thread, true, func(c cachedSession) (*kvSession, []string, error) {
		clear(added)
		// Asked on every attempt: a turn removed by the writer that got in
		// first has its key by then.
		if err := k.unseen(ctx, thread, c, ts, added); err != nil {
			return nil, nil, err
		}
		cur := c.v
		next := &kvSession{Summary: cur.Summary, Turns: make([]Turn, 0, len(cur.Turns)+len(ts))}
		next.Turns = append(next.Turns, cur.Turns...)
		for i, t := range ts {
			if added[i] {
				next.Turns = append(next.Turns, t)
			}
		}
		if len(next.Turns) == len(cur.Turns) {
			return nil, nil, nil
		}
		var removed []string
		if n := len(next.Turns) - k.opt.MaxTurns; n > 0 {
			removed = turnIDs(next.Turns[:n])
			next.Turns = next.Turns[n:]
		}
		s := Session{Thread: thread, Summary: next.Summary, Turns: next.Turns}
		n, sum, err := f.fold(ctx, &s)
		if err != nil {
			return nil, nil, err
		}
		if n > 0 {
			removed = append(removed, turnIDs(next.Turns[:n])...)
			next.Turns, next.Summary = next.Turns[n:], sum
		}
		return next, removed, nil
	})
	if err != nil {
		return added, fmt.Errorf("append %d turns (first %s) to session %s: %w", len(ts), ts[0].ID, thread, err)
	}
	return added, nil
}

// unseen sets added[i] for each turn of ts whose id neither cur holds nor
// has a key (nor an earlier turn of ts has); the keys are read concurrently.
//
// No key is read when the write creates the session (cur.rev is 0): an id
// key is written before the session write that removes its turn, and
// expires IDWindow (at most TTL) later, so while it lasts the session does
// too, unless it was forgotten (Forget need not remember the ids). If the
// session turns out to exist, the create fails and unseen is asked again.
// Nor is one read for a turn that the KV, as the session's only writer
// (cur.own), did not see leave it (see owned).
func (k *KV) unseen(ctx context.Context, thread string, cur cachedSession, ts []Turn, added []bool) error {
	var g *errgroup.Group // made for the first key to read
	var gctx context.Context
	for i, t := range ts {
		if hasTurn(cur.v, t.ID) || slices.ContainsFunc(ts[:i], func(o Turn) bool { return o.ID == t.ID }) {
			continue
		}
		if cur.rev == 0 || (cur.own != nil && !cur.own.mayHaveLeft(t.ID)) {
			added[i] = true
			continue
		}
		if g == nil {
			g, gctx = errgroup.WithContext(ctx)
			g.SetLimit(16)
		}
		g.Go(func() error {
			seen, err := k.marked(gctx, thread, t.ID)
			added[i] = err == nil && !seen
			return err
		})
	}
	if g == nil {
		return nil
	}
	return g.Wait()
}

func turnIDs(ts []Turn) []string {
	ids := make([]string, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids
}

// Load implements Store. It reads the bucket, so it sees other processes'
// writes.
func (k *KV) Load(ctx context.Context, thread string) (Session, error) {
	s := Session{Thread: thread}
	if thread == "" {
		return s, ErrNoThread
	}
	// Not through the cache: a read racing a write must not put an older
	// revision back into it.
	var v kvSession
	k.stats.reads.Add(1)
	rev, err := read(ctx, k.sessions, kvKey(thread), &v)
	if err != nil {
		return s, fmt.Errorf("load session %s: %w", thread, err)
	}
	if rev != 0 {
		k.stats.decodes.Add(1)
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
	err := k.modify(ctx, thread, false, func(c cachedSession) (*kvSession, []string, error) {
		cur := c.v
		folded = n > 0 && n <= len(cur.Turns) && cur.Turns[n-1].ID == lastID
		if !folded {
			return nil, nil, nil
		}
		next := &kvSession{Summary: summary, Turns: slices.Clone(cur.Turns[n:]), Seen: cur.Seen}
		return next, turnIDs(cur.Turns[:n]), nil
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
	k.forgetCached(kvKey(thread))
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

// appendJSON appends v as json.Marshal writes it (the field order and
// omitempty of its tags), without reflection: a session write encodes the
// whole value.
func (v *kvSession) appendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	if v.Summary != "" {
		b = append(b, `"summary":`...)
		b = envelope.AppendString(b, v.Summary)
		b = append(b, ',')
	}
	b = append(b, `"turns":`...)
	if v.Turns == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range v.Turns {
			if i > 0 {
				b = append(b, ',')
			}
			t := &v.Turns[i]
			b = append(b, `{"id":`...)
			b = envelope.AppendString(b, t.ID)
			b = append(b, `,"role":`...)
			b = envelope.AppendString(b, t.Role)
			b = append(b, `,"content":`...)
			b = envelope.AppendString(b, t.Content)
			b = append(b, `,"time":`...)
			var err error
			if b, err = envelope.AppendTime(b, t.Time); err != nil {
				return nil, fmt.Errorf("turn %s: %w", t.ID, err)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(v.Seen) > 0 {
		b = append(b, `,"seen":`...)
		b = envelope.AppendStrings(b, v.Seen)
	}
	return append(b, '}'), nil
}

// size is about the bytes of v's text.
func (v *kvSession) size() int {
	n := len(v.Summary)
	for i := range v.Turns {
		n += len(v.Turns[i].ID) + len(v.Turns[i].Role) + len(v.Turns[i].Content) + 80
	}
	return n
}
