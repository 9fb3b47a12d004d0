package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
)

func env(content string) *envelope.Envelope {
	return envelope.New(envelope.ChannelGitHub, envelope.RoleUser, content)
}

var errBad = errors.New("bad envelope")

// recorder observes by recording batches; an envelope with content "bad"
// fails. gate, when set, holds each call until it is closed or sent to.
type recorder struct {
	mu      sync.Mutex
	inside  map[string]int
	batches [][]string
	gate    chan struct{}
	t       *testing.T
}

func newRecorder(t *testing.T) *recorder { return &recorder{inside: map[string]int{}, t: t} }

func (r *recorder) observe(_ context.Context, thread string, es ...*envelope.Envelope) []error {
	r.mu.Lock()
	r.inside[thread]++
	if r.inside[thread] != 1 {
		r.t.Errorf("thread %s: %d batches at once, want 1", thread, r.inside[thread])
	}
	var contents []string
	for _, e := range es {
		contents = append(contents, e.Content)
	}
	r.batches = append(r.batches, contents)
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	errs := make([]error, len(es))
	for i, e := range es {
		if e.Content == "bad" {
			errs[i] = errBad
		}
	}
	r.mu.Lock()
	r.inside[thread]--
	r.mu.Unlock()
	return errs
}

// waiting waits until n handlers are queued on thread behind the leader.
func waiting(t *testing.T, q *threadQueues, thread string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		got := -1
		if tq := q.m[thread]; tq != nil {
			got = len(tq.waiting)
		}
		q.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d handlers waiting on %s, want %d", got, thread, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// wantBatches fails unless r observed the batches want (as fmt prints
// them) and q is left with no thread.
func wantBatches(t *testing.T, q *threadQueues, r *recorder, want string) {
	t.Helper()
	if got := fmt.Sprint(r.batches); got != want {
		t.Fatalf("got batches %s, want %s", got, want)
	}
	if n := q.len(); n != 0 {
		t.Fatalf("got %d threads left, want 0", n)
	}
}

// heldLeader makes queues of batches up to maxBatch and a recorder that
// holds each batch at its gate, and starts a leader ("first" on thread th)
// that has taken its batch and waits there.
func heldLeader(t *testing.T, maxBatch int) (*threadQueues, *recorder, *sync.WaitGroup) {
	q, r := newThreadQueues(maxBatch), newRecorder(t)
	r.gate = make(chan struct{})
	wg := new(sync.WaitGroup)
	enqueue(t, q, r, wg, "first", 0)
	return q, r, wg
}

// enqueue starts a handler of content on thread th and waits until n
// handlers wait behind the leader.
func enqueue(t *testing.T, q *threadQueues, r *recorder, wg *sync.WaitGroup, content string, n int) {
	t.Helper()
	wg.Go(func() { _ = q.do(t.Context(), "th", env(content), r.observe) })
	waiting(t, q, "th", n)
}

func TestThreadQueues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		test func(t *testing.T)
	}{
		{"OneBatchAtATimeEveryOutcome", testOneBatchAtATime},
		{"WaitersShareTheNextBatchInOrder", testWaitersShareTheNextBatch},
		{"OtherThreadsGoOn", testOtherThreadsGoOn},
		{"AWaiterThatGivesUpLeavesTheQueue", testAWaiterThatGivesUp},
		{"TheNextLeaderGivesUp", testTheNextLeaderGivesUp},
		{"APanicDoesNotLockTheThread", testAPanicDoesNotLockTheThread},
		{"AHotThreadWaitsForMore", testAHotThreadWaitsForMore},
		{"AHeldBatchIsTakenAfterLinger", testAHeldBatchIsTakenAfterLinger},
		{"AHeldBatchEndsWithItsContext", testAHeldBatchEndsWithItsContext},
		{"OnlyHotThreadsAreRemembered", testOnlyHotThreadsAreRemembered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t)
		})
	}
}

// testOneBatchAtATime drives one hot thread from eight handlers, every tenth
// envelope failing: each handler gets its own outcome, batches stay within the
// limit, every envelope is observed once and no thread is left behind.
func testOneBatchAtATime(t *testing.T) {
	q, r := newThreadQueues(8), newRecorder(t)
	const handlers, each = 8, 100
	var wg sync.WaitGroup
	for h := range handlers {
		wg.Go(func() {
			for i := range each {
				content := fmt.Sprintf("h%d-%d", h, i)
				if i%10 == 0 {
					content = "bad"
				}
				err := q.do(t.Context(), "hot", env(content), r.observe)
				if (content == "bad") != errors.Is(err, errBad) {
					t.Errorf("envelope %s: got %v", content, err)
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, b := range r.batches {
		if len(b) > 8 {
			t.Errorf("got a batch of %d, want at most 8", len(b))
		}
		total += len(b)
	}
	if total != handlers*each {
		t.Fatalf("observed %d envelopes, want %d", total, handlers*each)
	}
	if n := q.len(); n != 0 {
		t.Fatalf("got %d threads left, want 0", n)
	}
}

// testWaitersShareTheNextBatch queues five handlers behind a busy leader and
// expects them observed together, in arrival order, in the next batch.
func testWaitersShareTheNextBatch(t *testing.T) {
	q, r, wg := heldLeader(t, 64) // the leader took its batch and is observing
	for i := range 5 {
		enqueue(t, q, r, wg, fmt.Sprint(i), i+1)
	}
	close(r.gate)
	wg.Wait()
	if len(r.batches) != 2 || fmt.Sprint(r.batches[1]) != "[0 1 2 3 4]" {
		t.Fatalf("got batches %v, want [first] then [0 1 2 3 4]", r.batches)
	}
}

// testOtherThreadsGoOn holds thread a and expects thread b observed meanwhile.
func testOtherThreadsGoOn(t *testing.T) {
	q, r := newThreadQueues(64), newRecorder(t)
	hold := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- q.do(t.Context(), "a", env("a"), func(ctx context.Context, th string, es ...*envelope.Envelope) []error {
			<-hold
			return r.observe(ctx, th, es...)
		})
	}()
	waiting(t, q, "a", 0)
	if err := q.do(t.Context(), "b", env("b"), r.observe); err != nil {
		t.Fatal(err)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// testAWaiterThatGivesUp cancels a queued handler and expects it out of the
// next batch, the handler behind it observed, and the thread removed after.
func testAWaiterThatGivesUp(t *testing.T) {
	q, r, wg := heldLeader(t, 64)
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- q.do(ctx, "th", env("gives up"), r.observe) }()
	waiting(t, q, "th", 1)
	enqueue(t, q, r, wg, "stays", 2)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	waiting(t, q, "th", 1)
	close(r.gate)
	wg.Wait()
	wantBatches(t, q, r, "[[first] [stays]]")
}

// testTheNextLeaderGivesUp uses batches of one, so each leader gives up the
// lead to the next handler in line, and all are observed in order.
func testTheNextLeaderGivesUp(t *testing.T) {
	q, r, wg := heldLeader(t, 1)
	enqueue(t, q, r, wg, "second", 1)
	enqueue(t, q, r, wg, "third", 2)
	// With batches of one, the lead passes at every step.
	close(r.gate)
	wg.Wait()
	wantBatches(t, q, r, "[[first] [second] [third]]")
}

// testAPanicDoesNotLockTheThread panics in a leader's observe and expects the
// waiter behind it, and a later call, still served.
func testAPanicDoesNotLockTheThread(t *testing.T) {
	q, r := newThreadQueues(64), newRecorder(t)
	hold := make(chan struct{})
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = q.do(t.Context(), "th", env("boom"), func(ctx context.Context, th string, es ...*envelope.Envelope) []error {
			<-hold
			panic("boom")
		})
	}()
	waiting(t, q, "th", 0)
	other := make(chan error, 1)
	go func() { other <- q.do(t.Context(), "th", env("waits"), r.observe) }()
	waiting(t, q, "th", 1)
	close(hold)
	if p := <-panicked; p != "boom" {
		t.Fatalf("got panic %v, want boom", p)
	}
	if err := <-other; err != nil {
		t.Fatalf("the waiter after a panic: got %v, want its own batch observed", err)
	}
	if err := q.do(t.Context(), "th", env("later"), r.observe); err != nil {
		t.Fatal(err)
	}
}

// hotQueues makes queues that hold a hot thread's batch for linger or until
// full wait, and makes thread "th" hot: its first batch, [first], observed
// at once (a thread seen for the first time is never held).
func hotQueues(t *testing.T, linger time.Duration, full int) (*threadQueues, *recorder) {
	q, r := newThreadQueues(64).withLinger(linger, full), newRecorder(t)
	if err := q.do(t.Context(), "th", env("first"), r.observe); err != nil {
		t.Fatal(err)
	}
	return q, r
}

// testAHotThreadWaitsForMore holds the next leader of a hot thread (the
// linger is an hour) until four envelopes wait, and expects them in one
// batch; a leader that did not hold would have taken [a] alone.
func testAHotThreadWaitsForMore(t *testing.T) {
	q, r := hotQueues(t, time.Hour, 4)
	var wg sync.WaitGroup
	for i, c := range []string{"a", "b", "c"} {
		enqueue(t, q, r, &wg, c, i+1)
	}
	// The fourth fills the batch: the leader takes it at once.
	wg.Go(func() { _ = q.do(t.Context(), "th", env("d"), r.observe) })
	wg.Wait()
	wantBatches(t, q, r, "[[first] [a b c d]]")
}

// testAHeldBatchIsTakenAfterLinger expects a held leader with nobody
// joining it to take its batch once the linger has passed.
func testAHeldBatchIsTakenAfterLinger(t *testing.T) {
	q, r := hotQueues(t, 20*time.Millisecond, 64)
	if err := q.do(t.Context(), "th", env("alone"), r.observe); err != nil {
		t.Fatal(err)
	}
	wantBatches(t, q, r, "[[first] [alone]]")
}

// testAHeldBatchEndsWithItsContext cancels a held leader (the linger is an
// hour) and expects its batch taken at once.
func testAHeldBatchEndsWithItsContext(t *testing.T) {
	q, r := hotQueues(t, time.Hour, 64)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- q.do(ctx, "th", env("held"), r.observe) }()
	waiting(t, q, "th", 1)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("got %v, want the held batch observed", err)
	}
	wantBatches(t, q, r, "[[first] [held]]")
}

// testOnlyHotThreadsAreRemembered fills the record of batch times past its
// pruning size, lets the linger pass and expects the old entries dropped.
func testOnlyHotThreadsAreRemembered(t *testing.T) {
	q := newThreadQueues(64).withLinger(time.Second, 16)
	now := time.Unix(1_700_000_000, 0)
	q.now = func() time.Time { return now }
	for i := range minPruneAt {
		q.took(fmt.Sprint("old-", i))
	}
	now = now.Add(time.Second)
	q.took("fresh") // at the pruning size: the old ones go
	q.took("fresh-2")
	if len(q.taken) != 2 || q.taken["fresh"].IsZero() || q.taken["fresh-2"].IsZero() {
		t.Fatalf("got %d threads remembered, want the 2 taken within the linger", len(q.taken))
	}
}
