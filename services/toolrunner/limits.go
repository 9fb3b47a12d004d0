package toolrunner

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/tools"
)

// Defaults of the shared limits.
const (
	// DefaultLeaseTTL is how long a slot outlives a runner that stopped
	// renewing it (it died): the runner renews its slots every third of it.
	DefaultLeaseTTL = 30 * time.Second
	// CounterTTL is how long a count is kept after its last change: a
	// day's quota outlives its day, a thread's session count is forgotten
	// two days after the thread's last execution.
	CounterTTL = 48 * time.Hour
)

// KVLimits is a tools.LimitStore in two JetStream key-value buckets, so
// every runner on a bus (and the CLI) shares the limits and a restart keeps
// them:
//
//   - "<PREFIX>_TOOLCOUNTS" holds the counts (key "c.<base64url of the
//     counter key>", value the decimal count), changed by compare-and-set on
//     the key's revision; entries expire CounterTTL after their last change.
//   - "<PREFIX>_TOOLACTIVE" holds the global concurrency slots: key
//     "slot.<n>" (n below the policy's limits.concurrency) holds the JSON
//     tools.Execution running in it, taken with an atomic create. The owner
//     renews it every LeaseTTL/3 and deletes it at the end; the bucket's max
//     age is LeaseTTL, so the slots of a runner that died free themselves.
//
// Safe for concurrent use.
type KVLimits struct {
	counts, active jetstream.KeyValue
	ttl            time.Duration
	log            *slog.Logger

	mu   sync.Mutex
	seen map[string]seenCount // the last value and revision read per count key
	free map[string]uint64    // slots this process released, with the revision of the release
}

type seenCount struct {
	n   int
	rev uint64
}

// CountBucket returns the name of the count bucket for a bus prefix.
func CountBucket(prefix string) string { return bucketName(prefix, "TOOLCOUNTS") }

// ActiveBucket returns the name of the slot bucket for a bus prefix.
func ActiveBucket(prefix string) string { return bucketName(prefix, "TOOLACTIVE") }

// OpenLimits creates or opens the limit buckets of b. leaseTTL 0 is
// DefaultLeaseTTL; log may be nil.
func OpenLimits(ctx context.Context, b *bus.Bus, leaseTTL time.Duration, log *slog.Logger) (*KVLimits, error) {
	if leaseTTL <= 0 {
		leaseTTL = DefaultLeaseTTL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	counts, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      CountBucket(b.Prefix()),
		Description: "relay tool runner: per-thread session counts and daily quotas",
		TTL:         CounterTTL,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("open count bucket %s: %w", CountBucket(b.Prefix()), err)
	}
	active, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      ActiveBucket(b.Prefix()),
		Description: "relay tool runner: global concurrency slots held by the active executions",
		TTL:         leaseTTL,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("open active bucket %s: %w", ActiveBucket(b.Prefix()), err)
	}
	return &KVLimits{counts: counts, active: active, ttl: leaseTTL, log: log, seen: map[string]seenCount{}, free: map[string]uint64{}}, nil
}

func countKey(key string) string { return "c." + base64.RawURLEncoding.EncodeToString([]byte(key)) }

// Count implements tools.LimitStore. The counters are changed at once
// (one round trip in all when no other runner counted since); when one
// fails, the others are taken back.
func (l *KVLimits) Count(ctx context.Context, counters []tools.Counter) (func(), error) {
	if len(counters) == 0 {
		return func() {}, nil
	}
	errs := make([]error, len(counters))
	var wg sync.WaitGroup
	for i, c := range counters[1:] {
		wg.Go(func() { errs[i+1] = l.count(ctx, countKey(c.Key), c.Limit) })
	}
	errs[0] = l.count(ctx, countKey(counters[0].Key), counters[0].Limit)
	wg.Wait()
	var failed error
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, errFull):
			failed = cmp.Or(failed, counters[i].Full)
		default:
			failed = cmp.Or(failed, fmt.Errorf("count %s: %w", counters[i].Key, err))
		}
	}
	if failed != nil {
		for i, err := range errs {
			if err == nil {
				l.undo(countKey(counters[i].Key))
			}
		}
		return nil, failed
	}
	return func() {
		for _, c := range counters {
			l.undo(countKey(c.Key))
		}
	}, nil
}

var errFull = errors.New("at its limit")

// maxSeen bounds the remembered counts.
const maxSeen = 10000

// count adds one to key, retrying while the bus fails (a NATS server
// restarting) until ctx ends.
func (l *KVLimits) count(ctx context.Context, key string, limit int) error {
	var err error
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if err = l.add(ctx, key, 1, limit); err == nil || errors.Is(err, errFull) || ctx.Err() != nil {
			return err
		}
		if !pause(ctx, wait) {
			return err
		}
	}
}

// pause waits d, or until ctx ends (false).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// undo takes one count back; it must not be lost to the call's end, so it
// has its own deadline.
func (l *KVLimits) undo(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.add(ctx, key, -1, -1); err != nil {
		l.log.Warn("count not taken back", "key", key, "err", err)
	}
}

// add changes the count of key by delta with compare-and-set, refusing
// with errFull when delta > 0 would pass limit. It first tries the value it
// saw last (one round trip when no other runner counted since).
func (l *KVLimits) add(ctx context.Context, key string, delta, limit int) error {
	l.mu.Lock()
	cur, cached := l.seen[key]
	l.mu.Unlock()
	for range 100 {
		if !cached || (delta > 0 && cur.n+delta > limit) {
			var err error
			if cur, err = l.read(ctx, key); err != nil {
				return err
			}
		}
		cached = false
		next := max(0, cur.n+delta)
		if delta > 0 && next > limit {
			return errFull
		}
		rev, err := l.put(ctx, key, next, cur.rev)
		if err == nil {
			l.remember(key, seenCount{next, rev})
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err
		}
	}
	return fmt.Errorf("count %s: too much contention", key)
}

func (l *KVLimits) remember(key string, s seenCount) {
	l.mu.Lock()
	if len(l.seen) >= maxSeen {
		clear(l.seen) // threads come and go; a miss costs one read
	}
	l.seen[key] = s
	l.mu.Unlock()
}

// read returns the stored count of key (0 and revision 0 when none).
func (l *KVLimits) read(ctx context.Context, key string) (seenCount, error) {
	e, err := l.counts.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return seenCount{}, nil
	}
	if err != nil {
		return seenCount{}, err
	}
	n, err := strconv.Atoi(string(e.Value()))
	if err != nil {
		n = 0 // a value not written by the relay counts as none
	}
	return seenCount{n, e.Revision()}, nil
}

func (l *KVLimits) put(ctx context.Context, key string, n int, rev uint64) (uint64, error) {
	v := []byte(strconv.Itoa(n))
	if rev == 0 {
		return l.counts.Create(ctx, key, v)
	}
	return l.counts.Update(ctx, key, v, rev)
}

// Acquire implements tools.LimitStore: it takes a slot this process freed
// last (one round trip), else the first free "slot.<n>" from a random n on,
// and polls while every slot is taken (an expired lease frees a slot
// without an event to wait for).
func (l *KVLimits) Acquire(ctx context.Context, e tools.Execution, slots int) (func(), error) {
	v, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode execution %s: %w", e.ID, err)
	}
	var failed error // the last bus failure: retried, it may be a restart
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		key, rev, err := l.take(ctx, v, slots)
		if err == nil && key != "" {
			return l.hold(key, v, rev), nil
		}
		if err != nil && ctx.Err() == nil {
			failed = err
		}
		if !pause(ctx, wait) {
			if failed != nil {
				return nil, fmt.Errorf("%w (last failure: %w)", ctx.Err(), failed)
			}
			return nil, ctx.Err()
		}
	}
}

// take writes v into a free slot below slots and returns its key and
// revision; key "" means every slot is taken.
func (l *KVLimits) take(ctx context.Context, v []byte, slots int) (string, uint64, error) {
	for key, rev := l.popFree(slots); key != ""; key, rev = l.popFree(slots) {
		if next, err := l.active.Update(ctx, key, v, rev); err == nil {
			return key, next, nil
		}
	}
	start := rand.IntN(slots)
	for i := range slots {
		key := "slot." + strconv.Itoa((start+i)%slots)
		en, err := l.active.Get(ctx, key)
		var rev uint64
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err = l.active.Create(ctx, key, v)
		case err != nil:
			return "", 0, fmt.Errorf("read %s: %w", key, err)
		case len(en.Value()) == 0: // released
			rev, err = l.active.Update(ctx, key, v, en.Revision())
		default:
			continue
		}
		if err == nil {
			return key, rev, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return "", 0, fmt.Errorf("take %s: %w", key, err)
		}
	}
	return "", 0, nil
}

// popFree returns a slot below slots this process released, with the
// revision of its release, or "".
func (l *KVLimits) popFree(slots int) (string, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, rev := range l.free {
		delete(l.free, key)
		if n, err := strconv.Atoi(key[len("slot."):]); err == nil && n < slots {
			return key, rev
		}
	}
	return "", 0
}

// hold renews the lease on key every ttl/3 until release, which empties the
// slot (an empty value is a free slot) and remembers it as free.
func (l *KVLimits) hold(key string, v []byte, rev uint64) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(l.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
				next, err := l.active.Update(ctx, key, v, rev)
				cancel()
				if err != nil {
					l.log.Warn("execution slot lease not renewed", "slot", key, "err", err)
					continue
				}
				rev = next
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(stop)
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		next, err := l.active.Update(ctx, key, nil, rev)
		if err != nil {
			l.log.Warn("execution slot not released; its lease expires", "slot", key, "err", err)
			return
		}
		l.mu.Lock()
		l.free[key] = next
		l.mu.Unlock()
	})
}

// Active implements tools.LimitStore.
func (l *KVLimits) Active(ctx context.Context) ([]tools.Execution, error) {
	lister, err := l.active.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", l.active.Bucket(), err)
	}
	out := []tools.Execution{}
	for key := range lister.Keys() {
		en, err := l.active.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", key, err)
		}
		var e tools.Execution
		if len(en.Value()) > 0 && json.Unmarshal(en.Value(), &e) == nil {
			out = append(out, e)
		}
	}
	tools.SortExecutions(out)
	return out, nil
}
