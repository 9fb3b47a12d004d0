// Package sessiontest is the conformance suite every session.Store passes:
// the Redis store and the JetStream key-value store run the same tests.
package sessiontest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/memory/session"
)

// Factory returns n stores with the given options on one fresh, empty
// backend, as n processes sharing one server would open it (n is 1 unless a
// test is about several processes); the suite closes them.
type Factory func(t *testing.T, o session.Options, n int) []session.Store

// Run runs the conformance suite against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, newStore Factory)
	}{
		{"AppendLoad", testAppendLoad},
		{"AppendIdempotent", testAppendIdempotent},
		{"MaxTurns", testMaxTurns},
		{"Fold", testFold},
		{"Concurrent", testConcurrent},
		{"ConcurrentInOrder", testConcurrentInOrder},
		{"AppendFold", testAppendFold},
		{"AppendFoldBatch", testAppendFoldBatch},
		{"ConcurrentFolds", testConcurrentFolds},
		{"RedeliveredNotTwice", testRedelivered},
		{"Episodes", testEpisodes},
		{"Forget", testForget},
		{"Expiry", testExpiry},
		{"EmptyThread", testEmptyThread},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newStore)
		})
	}
}

func open(t *testing.T, newStore Factory, o session.Options) session.Store {
	t.Helper()
	return openN(t, newStore, o, 1)[0]
}

// openN opens n stores sharing one backend.
func openN(t *testing.T, newStore Factory, o session.Options, n int) []session.Store {
	t.Helper()
	ss := newStore(t, o, n)
	if len(ss) != n {
		t.Fatalf("factory returned %d stores, want %d", len(ss), n)
	}
	for _, s := range ss {
		t.Cleanup(func() { _ = s.Close() })
	}
	return ss
}

func turn(i int) session.Turn {
	return session.Turn{ID: uuid.NewString(), Role: "user", Content: fmt.Sprintf("turn %d", i),
		Time: time.Date(2025, 1, 1, 0, 0, i, 0, time.UTC)}
}

func thread() string { return "github:acme/repo#" + uuid.NewString()[:8] }

func mustAppend(t *testing.T, s session.Store, th string, tu session.Turn) bool {
	t.Helper()
	ok, err := s.Append(t.Context(), th, tu)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return ok
}

func mustLoad(t *testing.T, s session.Store, th string) session.Session {
	t.Helper()
	got, err := s.Load(t.Context(), th)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return got
}

func testAppendLoad(t *testing.T, newStore Factory) {
	s := open(t, newStore, session.Options{})
	th := "slack:T1/C1/1700000000.000100 with spaces & {braces}"
	want := []session.Turn{turn(1), turn(2), turn(3)}
	want[1].Role = "assistant"
	want[2].Role, want[2].Content = "tool", "ünïcode ✓ and \"quotes\""
	for _, tu := range want {
		if !mustAppend(t, s, th, tu) {
			t.Fatalf("Append(%s) = false, want true", tu.ID)
		}
	}
	got := mustLoad(t, s, th)
	if got.Thread != th || got.Summary != "" {
		t.Fatalf("got thread %q summary %q, want %q and none", got.Thread, got.Summary, th)
	}
	if len(got.Turns) != len(want) {
		t.Fatalf("got %d turns, want %d", len(got.Turns), len(want))
	}
	for i := range want {
		g, w := got.Turns[i], want[i]
		if g.ID != w.ID || g.Role != w.Role || g.Content != w.Content || !g.Time.Equal(w.Time) {
			t.Errorf("turn %d: got %+v, want %+v", i, g, w)
		}
	}
	if empty := mustLoad(t, s, thread()); len(empty.Turns) != 0 || empty.Summary != "" {
		t.Errorf("unknown thread: got %+v, want empty", empty)
	}
}

func testAppendIdempotent(t *testing.T, newStore Factory) {
	s := open(t, newStore, session.Options{})
	th := thread()
	tu := turn(1)
	if !mustAppend(t, s, th, tu) {
		t.Fatal("first Append = false, want true")
	}
	if mustAppend(t, s, th, tu) {
		t.Fatal("second Append of the same id = true, want false")
	}
	if got := mustLoad(t, s, th); len(got.Turns) != 1 {
		t.Fatalf("got %d turns, want 1", len(got.Turns))
	}
}

func testMaxTurns(t *testing.T, newStore Factory) {
	s := open(t, newStore, session.Options{MaxTurns: 10})
	th := thread()
	var ids []string
	for i := range 15 {
		tu := turn(i)
		ids = append(ids, tu.ID)
		mustAppend(t, s, th, tu)
	}
	got := mustLoad(t, s, th)
	if len(got.Turns) != 10 {
		t.Fatalf("got %d turns, want 10", len(got.Turns))
	}
	if got.Turns[0].ID != ids[5] || got.Turns[9].ID != ids[14] {
		t.Fatalf("got turns %s..%s, want the newest 10 (%s..%s)", got.Turns[0].ID, got.Turns[9].ID, ids[5], ids[14])
	}
	// A dropped turn is still known: a late redelivery is not re-added.
	if mustAppend(t, s, th, session.Turn{ID: ids[0], Role: "user", Content: "late"}) {
		t.Fatal("re-Append of a dropped turn = true, want false")
	}
}

func testFold(t *testing.T, newStore Factory) {
	s := open(t, newStore, session.Options{})
	th := thread()
	var ts []session.Turn
	for i := range 5 {
		ts = append(ts, turn(i))
		mustAppend(t, s, th, ts[i])
	}
	ctx := t.Context()
	if ok, err := s.Fold(ctx, th, 3, ts[1].ID, "wrong"); err != nil || ok {
		t.Fatalf("Fold with a stale id = %v, %v; want false, nil", ok, err)
	}
	if ok, err := s.Fold(ctx, th, 3, ts[2].ID, "summary of 0-2"); err != nil || !ok {
		t.Fatalf("Fold = %v, %v; want true, nil", ok, err)
	}
	got := mustLoad(t, s, th)
	if got.Summary != "summary of 0-2" || len(got.Turns) != 2 || got.Turns[0].ID != ts[3].ID {
		t.Fatalf("after fold got summary %q and %d turns, want the summary and turns 3-4", got.Summary, len(got.Turns))
	}
	// The same fold again (another worker's late attempt) changes nothing.
	if ok, _ := s.Fold(ctx, th, 3, ts[2].ID, "again"); ok {
		t.Fatal("repeated Fold = true, want false")
	}
	if mustAppend(t, s, th, ts[0]) {
		t.Fatal("re-Append of a folded turn = true, want false")
	}
	if ok, err := s.Fold(ctx, th, 2, ts[4].ID, "everything"); err != nil || !ok {
		t.Fatalf("Fold of all turns = %v, %v; want true, nil", ok, err)
	}
	got = mustLoad(t, s, th)
	if got.Summary != "everything" || len(got.Turns) != 0 {
		t.Fatalf("got summary %q and %d turns, want everything and 0", got.Summary, len(got.Turns))
	}
	next := turn(9)
	mustAppend(t, s, th, next)
	if got = mustLoad(t, s, th); got.Summary != "everything" || len(got.Turns) != 1 {
		t.Fatalf("got summary %q and %d turns, want the summary kept and 1 turn", got.Summary, len(got.Turns))
	}
}

func testConcurrent(t *testing.T, newStore Factory) {
	s := open(t, newStore, session.Options{})
	th := thread()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n*2)
	for i := range n {
		tu := turn(i)
		for range 2 { // every turn twice, as redeliveries racing each other
			wg.Go(func() {
				if _, err := s.Append(context.WithoutCancel(t.Context()), th, tu); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Append: %v", err)
	}
	got := mustLoad(t, s, th)
	if len(got.Turns) != n {
		t.Fatalf("got %d turns, want %d (each once)", len(got.Turns), n)
	}
}

func testEpisodes(t *testing.T, newStore Factory) {
	s := open(t, newStore, session.Options{})
	th := thread()
	ctx := t.Context()
	now := time.Now()
	a := session.Episode{ID: "a", Data: map[string]any{"fact": "deploys on fridays"}, Created: now, Expires: now.Add(time.Hour)}
	b := session.Episode{ID: "b", Data: map[string]any{"n": 2.0}, Created: now.Add(time.Second), Expires: now.Add(time.Hour)}
	for _, e := range []session.Episode{a, b, a} {
		if err := s.PutEpisode(ctx, th, e); err != nil {
			t.Fatalf("PutEpisode(%s): %v", e.ID, err)
		}
	}
	got, err := s.Episodes(ctx, th)
	if err != nil {
		t.Fatalf("Episodes: %v", err)
	}
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" || got[0].Data["fact"] != "deploys on fridays" {
		t.Fatalf("got %+v, want episodes a and b once each", got)
	}
	short := session.Episode{ID: "short", Data: map[string]any{"x": "y"}, Created: now, Expires: time.Now().Add(300 * time.Millisecond)}
	if err := s.PutEpisode(ctx, th, short); err != nil {
		t.Fatalf("PutEpisode(short): %v", err)
	}
	testenv.Poll(t, 10*time.Second, func() (bool, string) {
		got, err := s.Episodes(ctx, th)
		if err != nil {
			return false, err.Error()
		}
		for _, e := range got {
			if e.ID == "short" {
				return false, "episode short has not expired"
			}
		}
		return len(got) == 2, fmt.Sprintf("got %d episodes, want 2", len(got))
	})
	if got, _ := s.Episodes(ctx, thread()); len(got) != 0 {
		t.Fatalf("unknown thread: got %d episodes, want 0", len(got))
	}
}

func testForget(t *testing.T, newStore Factory) {
	s := open(t, newStore, session.Options{})
	th, other := thread(), thread()
	ctx := t.Context()
	mustAppend(t, s, th, turn(1))
	mustAppend(t, s, other, turn(1))
	if _, err := s.Fold(ctx, th, 1, mustLoad(t, s, th).Turns[0].ID, "sum"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEpisode(ctx, th, session.Episode{ID: "e", Data: map[string]any{"k": "v"}, Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(ctx, th); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	if got := mustLoad(t, s, th); len(got.Turns) != 0 || got.Summary != "" {
		t.Fatalf("after Forget got %+v, want empty", got)
	}
	if eps, _ := s.Episodes(ctx, th); len(eps) != 0 {
		t.Fatalf("after Forget got %d episodes, want 0", len(eps))
	}
	if got := mustLoad(t, s, other); len(got.Turns) != 1 {
		t.Fatalf("other thread: got %d turns, want 1", len(got.Turns))
	}
	if err := s.Forget(ctx, thread()); err != nil {
		t.Fatalf("Forget of an unknown thread: %v", err)
	}
	// A forgotten thread starts afresh; both stores forget its turns' ids
	// with it, so the turn folded away before Forget is new again.
	if !mustAppend(t, s, th, turn(2)) {
		t.Fatal("Append after Forget = false, want true")
	}
	if !mustAppend(t, s, th, turn(1)) {
		t.Fatal("Append after Forget of a turn folded before it = false, want true")
	}
}

func testExpiry(t *testing.T, newStore Factory) {
	s := open(t, newStore, session.Options{TTL: time.Second})
	th := thread()
	mustAppend(t, s, th, turn(1))
	if got := mustLoad(t, s, th); len(got.Turns) != 1 {
		t.Fatalf("got %d turns, want 1", len(got.Turns))
	}
	testenv.Poll(t, 15*time.Second, func() (bool, string) {
		got, err := s.Load(t.Context(), th)
		if err != nil {
			return false, err.Error()
		}
		return len(got.Turns) == 0, fmt.Sprintf("session still has %d turns", len(got.Turns))
	})
}

func testEmptyThread(t *testing.T, newStore Factory) {
	s := open(t, newStore, session.Options{})
	ctx := t.Context()
	if _, err := s.Append(ctx, "", turn(1)); err == nil {
		t.Error("Append to an empty thread: got nil error")
	}
	if _, err := s.Load(ctx, ""); err == nil {
		t.Error("Load of an empty thread: got nil error")
	}
	if err := s.Forget(ctx, ""); err == nil {
		t.Error("Forget of an empty thread: got nil error")
	}
}

// testConcurrentInOrder: writers in two processes append to one thread at
// once, each its own sequence, each turn also redelivered right after the
// next one went in. Every turn lands once, and each writer's turns keep
// their order.
func testConcurrentInOrder(t *testing.T, newStore Factory) {
	stores := openN(t, newStore, session.Options{MaxTurns: 500}, 2)
	th := thread()
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each*2)
	for w := range writers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			ctx := context.WithoutCancel(t.Context())
			var prev session.Turn
			for i := range each {
				tu := userTurn("w%d %03d", w, i)
				if ok, err := s.Append(ctx, th, tu); err != nil || !ok {
					errs <- fmt.Errorf("Append %s = %v, %v; want true, nil", tu.Content, ok, err)
				}
				if i > 0 {
					if ok, err := s.Append(ctx, th, prev); err != nil || ok {
						errs <- fmt.Errorf("redelivered Append %s = %v, %v; want false, nil", prev.Content, ok, err)
					}
				}
				prev = tu
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := mustLoad(t, stores[0], th)
	if len(got.Turns) != writers*each {
		t.Fatalf("got %d turns, want %d", len(got.Turns), writers*each)
	}
	checkWriterOrder(t, turnTexts(got.Turns), writers, each)
}

// appendFold appends one turn with AppendFold.
// userTurn is a new user turn whose content is format with args.
func userTurn(format string, args ...any) session.Turn {
	return session.Turn{ID: uuid.NewString(), Role: "user", Content: fmt.Sprintf(format, args...)}
}

// appendTurns appends new user turns from to to-1 (content format with the
// number) to th with f, one call each, fails the test unless each is added,
// and returns them.
func appendTurns(t *testing.T, s session.Store, th string, f session.Folder, format string, from, to int) []session.Turn {
	t.Helper()
	var ts []session.Turn
	for i := from; i < to; i++ {
		tu := userTurn(format, i)
		if ok, err := appendFold(s, t.Context(), th, tu, f); err != nil || !ok {
			t.Fatalf("AppendFold %s = %v, %v; want true, nil", tu.Content, ok, err)
		}
		ts = append(ts, tu)
	}
	return ts
}

func appendFold(s session.Store, ctx context.Context, th string, tu session.Turn, f session.Folder) (bool, error) {
	added, err := s.AppendFold(ctx, th, f, tu)
	if err == nil && len(added) != 1 {
		return false, fmt.Errorf("AppendFold of one turn reported %d results", len(added))
	}
	return err == nil && added[0], err
}

func turnTexts(ts []session.Turn) []string {
	out := make([]string, len(ts))
	for i, tu := range ts {
		out[i] = tu.Content
	}
	return out
}

// checkWriterOrder checks that texts ("w{writer} {i}") hold every writer's
// turns once each, in order.
func checkWriterOrder(t *testing.T, texts []string, writers, each int) {
	t.Helper()
	next := make([]int, writers)
	for _, text := range texts {
		var w, i int
		if _, err := fmt.Sscanf(text, "w%d %d", &w, &i); err != nil || w < 0 || w >= writers {
			t.Fatalf("unexpected turn %q", text)
		}
		if i != next[w] {
			t.Fatalf("writer %d: got turn %d, want %d (order %v)", w, i, next[w], texts)
		}
		next[w]++
	}
	for w, n := range next {
		if n != each {
			t.Errorf("writer %d: got %d turns, want %d", w, n, each)
		}
	}
}

// idFolder folds all but the newest turn once the session passes at bytes;
// its summary is the previous one plus the folded turns' contents, so a test
// can tell that every turn was folded once and in order.
// folding opens a store with the default options, a new thread, and an
// idFolder at bytes that counts its calls.
func folding(t *testing.T, newStore Factory, at int) (session.Store, string, session.Folder, *atomic.Int64) {
	t.Helper()
	calls := new(atomic.Int64)
	return open(t, newStore, session.Options{}), thread(), idFolder(at, calls), calls
}

func idFolder(at int, calls *atomic.Int64) session.Folder {
	return session.Folder{At: at, Fold: func(_ context.Context, s *session.Session) (int, string, error) {
		calls.Add(1)
		n := len(s.Turns) - 1
		parts := []string{}
		if s.Summary != "" {
			parts = append(parts, s.Summary)
		}
		parts = append(parts, turnTexts(s.Turns[:n])...)
		return n, strings.Join(parts, "|"), nil
	}}
}

func testAppendFold(t *testing.T, newStore Factory) {
	s, th, f, calls := folding(t, newStore, 40)
	ctx := t.Context()
	ts := appendTurns(t, s, th, f, "turn %05d", 0, 3) // 3 × 10 bytes: under At, no fold
	if calls.Load() != 0 {
		t.Fatalf("Fold asked %d times under At, want 0", calls.Load())
	}
	ts = append(ts, appendTurns(t, s, th, f, "turn %05d", 3, 5)...) // 50 bytes: past At, folded as part of the append
	got := mustLoad(t, s, th)
	if len(got.Turns) != 1 || got.Turns[0].ID != ts[4].ID {
		t.Fatalf("got %d turns, want only the newest (turn 4)", len(got.Turns))
	}
	if want := "turn 00000|turn 00001|turn 00002|turn 00003"; got.Summary != want {
		t.Fatalf("got summary %q, want %q", got.Summary, want)
	}
	for _, tu := range ts {
		if ok, err := appendFold(s, ctx, th, tu, f); err != nil || ok {
			t.Fatalf("AppendFold of %s again = %v, %v; want false, nil", tu.Content, ok, err)
		}
	}
	// A zero Folder never folds.
	other := thread()
	for i := range 10 {
		if _, err := appendFold(s, ctx, other, turn(i), session.Folder{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := mustLoad(t, s, other); len(got.Turns) != 10 || got.Summary != "" {
		t.Fatalf("zero Folder: got %d turns and summary %q, want 10 and none", len(got.Turns), got.Summary)
	}
}

// testConcurrentFolds: writers in two processes append with folding to one
// thread at once. Every turn ends up exactly once in the summary or the kept
// turns, each writer's in order: no fold lost or applied twice.
func testConcurrentFolds(t *testing.T, newStore Factory) {
	stores := openN(t, newStore, session.Options{}, 2)
	th := thread()
	const writers, each = 4, 25
	var calls atomic.Int64
	f := idFolder(60, &calls)
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			for i := range each {
				tu := userTurn("w%d %03d", w, i)
				if ok, err := appendFold(s, context.WithoutCancel(t.Context()), th, tu, f); err != nil || !ok {
					errs <- fmt.Errorf("AppendFold %s = %v, %v; want true, nil", tu.Content, ok, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := mustLoad(t, stores[1], th)
	var texts []string
	if got.Summary != "" {
		texts = strings.Split(got.Summary, "|")
	}
	texts = append(texts, turnTexts(got.Turns)...)
	if calls.Load() == 0 {
		t.Fatal("Fold was never asked")
	}
	checkWriterOrder(t, texts, writers, each)
}

// testRedelivered: turns that left the session, folded or beyond MaxTurns,
// are still known, also to another process; none is appended twice.
func testRedelivered(t *testing.T, newStore Factory) {
	stores := openN(t, newStore, session.Options{MaxTurns: 3}, 2)
	a, b := stores[0], stores[1]
	ctx := t.Context()
	th := thread()
	var calls atomic.Int64
	f := idFolder(25, &calls)
	ts := appendTurns(t, a, th, f, "turn %03d", 0, 20)
	before := mustLoad(t, a, th)
	for _, s := range stores {
		for _, tu := range ts {
			if ok, err := appendFold(s, ctx, th, tu, f); err != nil || ok {
				t.Fatalf("redelivered %s = %v, %v; want false, nil", tu.Content, ok, err)
			}
			if ok, err := s.Append(ctx, th, tu); err != nil || ok {
				t.Fatalf("redelivered Append %s = %v, %v; want false, nil", tu.Content, ok, err)
			}
		}
	}
	after := mustLoad(t, b, th)
	if after.Summary != before.Summary || len(after.Turns) != len(before.Turns) {
		t.Fatalf("redeliveries changed the session: got %q and %d turns, want %q and %d",
			after.Summary, len(after.Turns), before.Summary, len(before.Turns))
	}
}

// testAppendFoldBatch: several turns in one call land in order, each once
// (repeats inside the batch and turns appended before are reported as not
// added), and the fold applies once to the whole batch.
func testAppendFoldBatch(t *testing.T, newStore Factory) {
	s, th, f, calls := folding(t, newStore, 45)
	ctx := t.Context()
	mk := func(i int) session.Turn { return userTurn("turn %05d", i) }
	first := appendTurns(t, s, th, f, "turn %05d", 0, 1)[0]
	batch := []session.Turn{mk(1), mk(2), first, mk(3)}
	batch = append(batch, batch[1], mk(4)) // turn 2 twice in one batch
	added, err := s.AppendFold(ctx, th, f, batch...)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, false, true, false, true}; !slices.Equal(added, want) {
		t.Fatalf("got added %v, want %v", added, want)
	}
	got := mustLoad(t, s, th)
	if want := "turn 00000|turn 00001|turn 00002|turn 00003"; got.Summary != want || len(got.Turns) != 1 || got.Turns[0].Content != "turn 00004" {
		t.Fatalf("got summary %q and turns %v, want %q and turn 4", got.Summary, turnTexts(got.Turns), want)
	}
	if calls.Load() != 1 {
		t.Fatalf("Fold asked %d times, want once for the batch", calls.Load())
	}
	if added, err := s.AppendFold(ctx, th, f); err != nil || len(added) != 0 {
		t.Fatalf("AppendFold of no turns = %v, %v; want none, nil", added, err)
	}
}
