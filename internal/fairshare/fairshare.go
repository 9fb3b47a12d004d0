// Package fairshare limits work per source (a repository, a Slack channel,
// an actor) in fixed windows, and collects what was over the limit into one
// digest per source and window.
//
// Counts and digests live in a JetStream key-value bucket, so every process
// of the relay (several `relay agent` processes behind one durable consumer)
// shares one count: each Take is a revision-checked update, and exactly one
// Take per source and window is the first over the limit, so exactly one
// notice says so. A digest holds the number of events it stands for and the
// first MaxItems of them, so a flood of any size takes a bounded amount of
// memory and storage. Keys expire with the bucket's TTL (a few windows).
package fairshare

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MaxItems is how many events a digest lists; it counts all of them.
const MaxItems = 20

// Grace is how long after its window ends a digest is due: a process whose
// clock is a little behind, or that has not flushed yet, may still add to it.
const Grace = 2 * time.Second

// Bucket is the key-value bucket of the counts and digests.
func Bucket(prefix string) string { return prefix + "_fairshare" }

// Opener opens a key-value bucket (bus.Bus.OpenBucket).
type Opener interface {
	OpenBucket(ctx context.Context, name, description string, ttl time.Duration) (jetstream.KeyValue, error)
}

// Limiter counts per source and window. It is safe for concurrent use, and
// any number of Limiters over one bucket share their counts.
//
// Once a source is over its limit in a window, the Limiter remembers it and
// Take answers from memory for the rest of the window; Defer collects in
// memory and Flush writes what was collected, one update per digest. So a
// flood costs a few bucket writes per source and flush, not per event.
type Limiter struct {
	kv     jetstream.KeyValue
	window time.Duration
	now    func() time.Time

	mu      sync.Mutex
	over    map[string]Verdict // sources over their limit, by source
	pending map[string]*batch  // deferred events not yet written, by digest key
}

// batch is what Defer collected for one digest since the last Flush.
type batch struct {
	v     Verdict
	count int
	items []Item
}

// maxCached bounds the sources remembered over their limit and the digests
// collected in memory; beyond it Take and Defer go to the bucket.
const maxCached = 10_000

// Open opens the bucket of prefix with windows of window (at least a
// second).
func Open(ctx context.Context, o Opener, prefix string, window time.Duration) (*Limiter, error) {
	if window < time.Second {
		return nil, fmt.Errorf("fairshare: window %s must be at least 1s", window)
	}
	// A digest must outlive its window until a sweep publishes it.
	kv, err := o.OpenBucket(ctx, Bucket(prefix), "relay fair share: work per source and window, digests of what was over",
		max(5*window, time.Minute))
	if err != nil {
		return nil, err
	}
	return &Limiter{kv: kv, window: window, now: time.Now, over: map[string]Verdict{}, pending: map[string]*batch{}}, nil
}

// SetClock replaces time.Now (nil: keep it), for tests of windows.
func (l *Limiter) SetClock(now func() time.Time) {
	if now != nil {
		l.now = now
	}
}

// Window is the length of the limiter's windows.
func (l *Limiter) Window() time.Duration { return l.window }

// Verdict is what Take decided.
type Verdict struct {
	// Source is the source counted, for example "github:octo/hello".
	Source string
	// Allowed says the work is within the limit.
	Allowed bool
	// FirstOver is set on exactly one Take per source and window: the
	// first over the limit (the one that sends the notice).
	FirstOver bool
	// Count is the work counted in the window so far, this one included.
	Count, Limit int
	// Start and End bound the window.
	Start, End time.Time
}

// Take counts one unit of work for source in the current window against
// limit (0 or less: no limit, nothing counted).
func (l *Limiter) Take(ctx context.Context, source string, limit int) (Verdict, error) {
	start := l.now().Truncate(l.window)
	v := Verdict{Source: source, Allowed: true, Limit: limit, Start: start, End: start.Add(l.window)}
	if limit <= 0 {
		return v, nil
	}
	l.mu.Lock()
	if o, ok := l.over[source]; ok && o.Start.Equal(start) && o.Limit == limit {
		l.mu.Unlock()
		o.FirstOver = false
		return o, nil
	}
	l.mu.Unlock()
	key := "n." + strconv.FormatInt(start.Unix(), 10) + "." + hash(source)
	for range 100 {
		n, err := l.update(ctx, key, func(b []byte) ([]byte, error) {
			c, _ := strconv.Atoi(string(b))
			return []byte(strconv.Itoa(c + 1)), nil
		})
		if errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return v, fmt.Errorf("count %s: %w", source, err)
		}
		v.Count, _ = strconv.Atoi(string(n))
		v.Allowed = v.Count <= limit
		v.FirstOver = v.Count == limit+1
		if !v.Allowed {
			l.remember(v)
		}
		return v, nil
	}
	return v, fmt.Errorf("count %s: too many concurrent writers", source)
}

var errConflict = errors.New("conflict")

// update applies f to key's value (nil when absent) with a revision check.
func (l *Limiter) update(ctx context.Context, key string, f func([]byte) ([]byte, error)) ([]byte, error) {
	var old []byte
	var rev uint64
	ent, err := l.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, err
	default:
		old, rev = ent.Value(), ent.Revision()
	}
	next, err := f(old)
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		_, err = l.kv.Create(ctx, key, next)
	} else {
		_, err = l.kv.Update(ctx, key, next, rev)
	}
	if isWrongSequence(err) {
		return nil, errConflict
	}
	return next, err
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Item is one event of a digest.
type Item struct {
	EnvelopeID string    `json:"envelope_id"`
	Thread     string    `json:"thread,omitempty"`
	URL        string    `json:"url,omitempty"`
	Actor      string    `json:"actor,omitempty"`
	Title      string    `json:"title,omitempty"`
	At         time.Time `json:"at"`
}

// Digest is what was over the limit of one source in one window.
type Digest struct {
	Source string    `json:"source"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Limit  int       `json:"limit"`
	// Count is how many events the digest stands for; Items lists the
	// first MaxItems.
	Count int    `json:"count"`
	Items []Item `json:"items"`

	key string
	rev uint64
}

// Key names the digest (unique per source and window), for de-duplicating
// what is made of it.
func (d *Digest) Key() string { return d.key }

// remember notes that v's source is over its limit in v's window.
func (l *Limiter) remember(v Verdict) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.over) >= maxCached {
		for k, o := range l.over {
			if !o.Start.Equal(v.Start) {
				delete(l.over, k)
			}
		}
		if len(l.over) >= maxCached {
			return
		}
	}
	l.over[v.Source] = v
}

// Defer adds it to the digest of v's source and window: in memory until
// the next Flush (written at once when too many digests are collecting).
func (l *Limiter) Defer(ctx context.Context, v Verdict, it Item) error {
	key := "d." + strconv.FormatInt(v.Start.Unix(), 10) + "." + hash(v.Source)
	it.Title = cut(it.Title, 200)
	l.mu.Lock()
	b := l.pending[key]
	if b == nil && len(l.pending) < maxCached {
		b = &batch{v: v}
		l.pending[key] = b
	}
	if b != nil {
		b.count++
		if len(b.items) < MaxItems {
			b.items = append(b.items, it)
		}
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	return l.write(ctx, key, &batch{v: v, count: 1, items: []Item{it}})
}

// Flush writes what Defer collected. Call it often (the agent does every
// 200ms) and once more before stopping; what it could not write stays
// collected for the next.
func (l *Limiter) Flush(ctx context.Context) error {
	l.mu.Lock()
	pending := l.pending
	l.pending = map[string]*batch{}
	l.mu.Unlock()
	var errs []error
	for key, b := range pending {
		if err := l.write(ctx, key, b); err != nil {
			errs = append(errs, err)
			l.mu.Lock()
			if o := l.pending[key]; o != nil { // collected meanwhile: merge
				b.count += o.count
				b.items = append(b.items, o.items[:min(len(o.items), MaxItems-min(len(b.items), MaxItems))]...)
			}
			l.pending[key] = b
			l.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// write adds b to the digest key in the bucket.
func (l *Limiter) write(ctx context.Context, key string, bt *batch) error {
	v := bt.v
	for range 100 {
		_, err := l.update(ctx, key, func(b []byte) ([]byte, error) {
			d := Digest{Source: v.Source, Start: v.Start, End: v.End, Limit: v.Limit}
			if b != nil {
				if err := json.Unmarshal(b, &d); err != nil {
					return nil, fmt.Errorf("digest %s: %w", key, err)
				}
			}
			d.Count += bt.count
			if n := MaxItems - len(d.Items); n > 0 {
				d.Items = append(d.Items, bt.items[:min(n, len(bt.items))]...)
			}
			return json.Marshal(d)
		})
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("add %d events to the digest of %s: %w", bt.count, v.Source, err)
		}
		return nil
	}
	return fmt.Errorf("add %d events to the digest of %s: too many concurrent writers", bt.count, v.Source)
}

// Due returns the digests whose window ended (Grace ago), oldest first.
func (l *Limiter) Due(ctx context.Context) ([]*Digest, error) {
	lister, err := l.kv.ListKeysFiltered(ctx, "d.>")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list digests: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	cutoff := l.now().Add(-Grace)
	var out []*Digest
	for key := range lister.Keys() {
		parts := strings.Split(key, ".")
		if len(parts) != 3 {
			continue
		}
		start, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil || time.Unix(start, 0).Add(l.window).After(cutoff) {
			continue
		}
		ent, err := l.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // another process took it
		} else if err != nil {
			return out, fmt.Errorf("read digest %s: %w", key, err)
		}
		d := &Digest{key: key, rev: ent.Revision()}
		if err := json.Unmarshal(ent.Value(), d); err != nil {
			_ = l.kv.Delete(ctx, key, jetstream.LastRevision(ent.Revision()))
			continue
		}
		out = append(out, d)
	}
	return out, nil
}

// Done removes a digest that was made into work; false when another process
// removed it or added to it since Due read it.
func (l *Limiter) Done(ctx context.Context, d *Digest) (bool, error) {
	err := l.kv.Delete(ctx, d.key, jetstream.LastRevision(d.rev))
	if isWrongSequence(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("remove digest %s: %w", d.key, err)
	}
	return true, nil
}

// hash makes a source a key token (sources hold ':' and '#', which keys may
// not).
func hash(source string) string {
	h := sha256.Sum256([]byte(source))
	return hex.EncodeToString(h[:12])
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
