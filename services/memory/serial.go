package memory

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/relaystation/relay/envelope"
)

// threadQueues serialises the worker's handling per thread and lets the
// envelopes of a hot thread share session writes. A handler queues its
// envelope behind the others of its thread; when no one is working on the
// thread it leads: it takes every queued envelope (up to maxBatch), observes
// them together in arrival order, hands each handler its outcome, and passes
// the lead to the first handler that queued meanwhile. So the handlers of one
// thread never race on its session, one write carries all the turns that
// arrived while the previous write was under way, and different threads do
// not wait for each other.
//
// A hot thread, one whose previous batch was taken less than linger before,
// is given up to linger for more of its envelopes to arrive before its
// leader takes the batch (or until full are queued): at a steady stream of
// webhooks about one thing, a write then carries every turn of the last few
// milliseconds instead of one, and the session is written a few times fewer
// (the envelopes wait at most linger longer to be stored). A thread whose
// envelopes come further apart than linger is never held.
type threadQueues struct {
	mu       sync.Mutex
	m        map[string]*threadQueue
	maxBatch int

	linger  time.Duration        // 0: never hold a batch
	full    int                  // a held batch is taken once this many wait
	taken   map[string]time.Time // when a thread's last batch was taken; recent ones only
	pruneAt int                  // taken's size at which the old entries are dropped
	now     func() time.Time
}

// threadQueue is a thread someone is working on; guarded by threadQueues.mu.
type threadQueue struct {
	waiting []*queued
	// filled is set while the leader holds its batch for more envelopes;
	// do closes it when full are waiting.
	filled chan struct{}
}

type queued struct {
	e    *envelope.Envelope
	lead bool         // told to lead; guarded by threadQueues.mu
	done chan outcome // buffered: senders never wait
}

type outcome struct {
	err  error
	lead bool
}

// observeFunc observes envelopes of one thread; errs[i] is the outcome of es[i].
type observeFunc func(ctx context.Context, thread string, es ...*envelope.Envelope) []error

func newThreadQueues(maxBatch int) *threadQueues {
	return &threadQueues{m: map[string]*threadQueue{}, maxBatch: max(1, maxBatch), taken: map[string]time.Time{}, now: time.Now}
}

// withLinger makes the queues hold a hot thread's batch for up to linger,
// taking it early once full envelopes wait (at most maxBatch).
func (q *threadQueues) withLinger(linger time.Duration, full int) *threadQueues {
	q.linger, q.full = linger, min(max(1, full), q.maxBatch)
	return q
}

// do observes e, an envelope of thread, with observe once the envelopes of
// thread queued before it are done, and returns its outcome. A handler whose
// ctx ends while it waits returns ctx's error; if its envelope was already
// taken into a batch, it may be stored all the same (a redelivery is then
// recognised by its id).
func (q *threadQueues) do(ctx context.Context, thread string, e *envelope.Envelope, observe observeFunc) error {
	it := &queued{e: e, done: make(chan outcome, 1)}
	q.mu.Lock()
	tq := q.m[thread]
	leader := tq == nil
	if leader {
		tq = &threadQueue{}
		q.m[thread] = tq
		it.lead = true
	}
	tq.waiting = append(tq.waiting, it)
	if tq.filled != nil && len(tq.waiting) >= q.full {
		close(tq.filled)
		tq.filled = nil
	}
	q.mu.Unlock()
	if !leader {
		select {
		case o := <-it.done:
			if !o.lead {
				return o.err
			}
		case <-ctx.Done():
			return q.abandon(ctx, thread, tq, it)
		}
	}
	return q.lead(ctx, thread, tq, it, observe)
}

// lead observes the batch at the head of the queue, whose first envelope is
// the leader's own, then passes the lead on.
func (q *threadQueues) lead(ctx context.Context, thread string, tq *threadQueue, it *queued, observe observeFunc) error {
	q.mu.Lock()
	if q.linger > 0 && len(tq.waiting) < q.full && q.now().Sub(q.taken[thread]) < q.linger {
		q.hold(ctx, tq)
	}
	q.took(thread)
	n := min(len(tq.waiting), q.maxBatch)
	batch := slices.Clone(tq.waiting[:n])
	tq.waiting = tq.waiting[n:]
	q.mu.Unlock()

	delivered := false
	defer func() {
		// Also when observe panics: the others are told, and the thread
		// does not stay locked.
		if !delivered {
			for _, b := range batch {
				if b != it {
					b.done <- outcome{err: errObservePanicked}
				}
			}
		}
		q.mu.Lock()
		q.passLead(thread, tq)
		q.mu.Unlock()
	}()
	es := make([]*envelope.Envelope, len(batch))
	for i, b := range batch {
		es[i] = b.e
	}
	errs := observe(ctx, thread, es...)
	var mine error
	for i, b := range batch {
		if b == it {
			mine = errs[i]
			continue
		}
		b.done <- outcome{err: errs[i]}
	}
	delivered = true
	return mine
}

// hold waits, with q.mu held on entry and on return, until full envelopes
// wait on tq, linger has passed, or ctx ends.
func (q *threadQueues) hold(ctx context.Context, tq *threadQueue) {
	filled := make(chan struct{})
	tq.filled = filled
	q.mu.Unlock()
	t := time.NewTimer(q.linger)
	select {
	case <-filled:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	q.mu.Lock()
	if tq.filled == filled {
		tq.filled = nil
	}
}

// minPruneAt is the size of taken at which its entries older than linger
// (threads no longer hot) are first dropped.
const minPruneAt = 4096

// took records that thread's batch is taken now. Called with q.mu held.
// The old entries are dropped whenever taken doubles since the last time,
// so the map holds about twice the threads hot within linger, at a constant
// cost per batch.
func (q *threadQueues) took(thread string) {
	if q.linger <= 0 {
		return
	}
	now := q.now()
	if len(q.taken) >= max(q.pruneAt, minPruneAt) {
		for th, at := range q.taken {
			if now.Sub(at) >= q.linger {
				delete(q.taken, th)
			}
		}
		q.pruneAt = 2 * len(q.taken)
	}
	q.taken[thread] = now
}

// errObservePanicked is the outcome of the envelopes that shared a batch with
// one whose handling panicked (that one's handler reports the panic).
var errObservePanicked = errors.New("memory worker: another envelope of the batch panicked; retrying")

// passLead tells the first waiting handler to lead, or drops the thread when
// none waits. Called with q.mu held.
func (q *threadQueues) passLead(thread string, tq *threadQueue) {
	if len(tq.waiting) == 0 {
		delete(q.m, thread)
		return
	}
	next := tq.waiting[0]
	next.lead = true
	next.done <- outcome{lead: true}
}

// abandon takes it out of the queue of a handler that stops waiting; if it
// had just been told to lead, the lead passes on.
func (q *threadQueues) abandon(ctx context.Context, thread string, tq *threadQueue, it *queued) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(tq.waiting, it); i >= 0 {
		tq.waiting = slices.Delete(tq.waiting, i, i+1)
		if it.lead {
			q.passLead(thread, tq)
		}
	}
	return ctx.Err()
}

// len is the number of threads being worked on.
func (q *threadQueues) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.m)
}
