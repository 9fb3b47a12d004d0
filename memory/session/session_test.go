package session_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/memory/session"
	"github.com/relaystation/relay/memory/session/sessiontest"
)

func redisURL() string { return testenv.Getenv("REDIS_URL", "redis://127.0.0.1:6379") }

// newTestRedis returns a Redis store under prefix (unique to the test),
// whose keys are deleted at the end.
func newTestRedis(t *testing.T, prefix string, o session.Options) session.Store {
	t.Helper()
	s, err := session.NewRedis(t.Context(), session.RedisConfig{URL: redisURL(), KeyPrefix: prefix, Options: o})
	if err != nil {
		testenv.Missing(t, "redis at %s: %v (start redis-server or set REDIS_URL)", redisURL(), err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := s.Client().Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			s.Client().Del(ctx, keys...)
		}
	})
	return s
}

func TestRedis(t *testing.T) {
	t.Parallel()
	sessiontest.Run(t, func(t *testing.T, o session.Options, n int) []session.Store {
		prefix := "test:" + uuid.NewString()[:8] + ":"
		var out []session.Store
		for range n {
			out = append(out, newTestRedis(t, prefix, o))
		}
		return out
	})
}

func TestKV(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	sessiontest.Run(t, func(t *testing.T, o session.Options, n int) []session.Store {
		bucket := "s" + uuid.NewString()[:8]
		var out []session.Store
		for range n {
			s, err := session.NewKV(t.Context(), b.JetStream(), session.KVConfig{Bucket: bucket, Options: o})
			if err != nil {
				t.Fatalf("NewKV: %v", err)
			}
			out = append(out, s)
		}
		return out
	})
}

// TestRedisKeyLayout checks the documented key: the turns of a thread are the
// list "session:{thread}", expiring 24 h after the last turn.
func TestRedisKeyLayout(t *testing.T) {
	t.Parallel()
	s, err := session.NewRedis(t.Context(), session.RedisConfig{URL: redisURL()})
	if err != nil {
		testenv.Missing(t, "redis at %s: %v", redisURL(), err)
	}
	defer s.Close()
	th := "test:" + uuid.NewString()
	key := "session:" + th
	t.Cleanup(func() { s.Client().Del(context.Background(), key, key+":ids", key+":summary", key+":size") })
	if _, err := s.Append(t.Context(), th, session.Turn{ID: uuid.NewString(), Role: "user", Content: "hi"}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Client().LLen(t.Context(), key).Result(); err != nil || n != 1 {
		t.Fatalf("LLEN %s = %d, %v; want 1", key, n, err)
	}
	ttl, err := s.Client().TTL(t.Context(), key).Result()
	if err != nil || ttl < 23*time.Hour || ttl > 24*time.Hour {
		t.Fatalf("TTL %s = %s, %v; want about 24h", key, ttl, err)
	}
}

// TestKVIDWindow: the ids of turns that left a session live in their own
// bucket, expiring after the id window (bounded by the session TTL), so a hot
// thread leaves a bounded number of keys behind; while they live, a
// redelivered turn that was folded away is still a duplicate.
func TestKVIDWindow(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	o := session.Options{MaxTurns: 2, TTL: time.Hour}
	s, err := session.NewKV(t.Context(), b.JetStream(), session.KVConfig{Bucket: "win", IDWindow: 2 * time.Hour, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := s.Append(t.Context(), "th", session.Turn{ID: fmt.Sprint("e", i), Role: "user", Content: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	added, err := s.Append(t.Context(), "th", session.Turn{ID: "e0", Role: "user", Content: "x"})
	if err != nil || added {
		t.Fatalf("redelivered e0 after it left the session: added %v, %v; want a duplicate", added, err)
	}
	ids, err := b.JetStream().KeyValue(t.Context(), "win_ids")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ids.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != time.Hour {
		t.Errorf("id bucket ttl %s, want the session TTL 1h (the window is capped by it)", st.TTL())
	}
	if st.Values() < 3 {
		t.Errorf("id bucket holds %d keys, want one per turn that left the session (3)", st.Values())
	}
}

// TestKVNewThreadOneWrite: appending to a thread the KV has not seen costs
// one write and no read (the session is taken to be new); when another KV
// already made the session, the create fails, the session is read without a
// wait, and the append still lands once, behind the other's turns, with a
// turn the other folded away recognised as a duplicate.
func TestKVNewThreadOneWrite(t *testing.T) {
	t.Parallel()
	a, other := twoKVs(t, 2)
	ctx := t.Context()
	for i := range 20 {
		th := fmt.Sprint("new-", i)
		if added, err := a.Append(ctx, th, session.Turn{ID: "e0", Role: "user", Content: "x"}); err != nil || !added {
			t.Fatalf("Append to %s = %v, %v; want added", th, added, err)
		}
	}
	if st := a.Stats(); st.Writes != 20 || st.Reads != 0 || st.MarkerReads != 0 || st.Guesses != 20 || st.Misses != 0 {
		t.Fatalf("20 new threads: stats %+v, want 20 writes, 20 guesses, no reads", st)
	}

	for i := range 3 { // e0 leaves the session: it gets an id key
		if _, err := other.Append(ctx, "shared", session.Turn{ID: fmt.Sprint("s", i), Role: "user", Content: fmt.Sprint("t", i)}); err != nil {
			t.Fatal(err)
		}
	}
	before := a.Stats()
	if added, err := a.Append(ctx, "shared", session.Turn{ID: "s0", Role: "user", Content: "late"}); err != nil || added {
		t.Fatalf("redelivered s0 to a KV that never saw the thread = %v, %v; want a duplicate", added, err)
	}
	if added, err := a.Append(ctx, "shared", session.Turn{ID: "s3", Role: "user", Content: "t3"}); err != nil || !added {
		t.Fatalf("Append of s3 = %v, %v; want added", added, err)
	}
	st := a.Stats()
	if st.Misses-before.Misses != 1 || st.Conflicts != 0 || st.Reads-before.Reads != 1 {
		t.Fatalf("stats before %+v, after %+v: want one miss, one read, no conflict", before, st)
	}
	got, err := other.Load(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Turns) != 2 || got.Turns[0].ID != "s2" || got.Turns[1].ID != "s3" {
		t.Fatalf("got turns %+v, want s2 then s3", got.Turns)
	}
}

// TestKVOwnedSessionReadsNoIDKeys: a KV that created a session and is its
// only writer reads no id key for new turns (it knows which turns left),
// still recognises a turn that left as a duplicate, and once another KV
// writes the session it reads the id keys again.
func TestKVOwnedSessionReadsNoIDKeys(t *testing.T) {
	t.Parallel()
	a, other := twoKVs(t, 5)
	ctx := t.Context()
	turn := func(i int) session.Turn {
		return session.Turn{ID: fmt.Sprint("e", i), Role: "user", Content: fmt.Sprint("turn ", i)}
	}
	appendTo := func(s *session.KV, tu session.Turn) bool {
		t.Helper()
		added, err := s.Append(ctx, "hot", tu)
		if err != nil {
			t.Fatal(err)
		}
		return added
	}
	for i := range 50 {
		if !appendTo(a, turn(i)) {
			t.Fatalf("turn %d not added", i)
		}
	}
	if st := a.Stats(); st.MarkerReads != 0 || st.MarkerWrites != 45 || st.Reads != 0 || st.Writes != 50 {
		t.Fatalf("50 turns from the only writer, 5 kept: stats %+v, want 50 writes, 45 id keys written, no reads", st)
	}
	if appendTo(a, turn(3)) {
		t.Fatal("redelivered turn 3, which left the session, was added again")
	}
	if st := a.Stats(); st.MarkerReads != 1 {
		t.Fatalf("redelivery of a turn that left: %d id key reads, want 1 (the KV saw it leave and asks)", st.MarkerReads)
	}

	if !appendTo(other, turn(50)) { // turn 45 leaves, written by the other KV
		t.Fatal("turn 50 not added")
	}
	if appendTo(a, turn(45)) {
		t.Fatal("turn 45, removed by the other KV, was added again")
	}
	before := a.Stats()
	if !appendTo(a, turn(51)) {
		t.Fatal("turn 51 not added")
	}
	if st := a.Stats(); st.MarkerReads-before.MarkerReads != 1 {
		t.Fatalf("a turn appended after another writer: %d id key reads, want 1", st.MarkerReads-before.MarkerReads)
	}
	got, err := other.Load(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tu := range got.Turns {
		ids = append(ids, tu.ID)
	}
	if want := "e47 e48 e49 e50 e51"; fmt.Sprint(ids) != "["+want+"]" {
		t.Fatalf("got turns %v, want [%s]", ids, want)
	}
}

// twoKVs returns two KVs on one fresh bus and bucket, as two processes
// would have, keeping maxTurns turns a session.
func twoKVs(t *testing.T, maxTurns int) (*session.KV, *session.KV) {
	t.Helper()
	b := bustest.Embedded(t)
	var kvs [2]*session.KV
	for i := range kvs {
		s, err := session.NewKV(t.Context(), b.JetStream(), session.KVConfig{Options: session.Options{MaxTurns: maxTurns}})
		if err != nil {
			t.Fatal(err)
		}
		kvs[i] = s
	}
	return kvs[0], kvs[1]
}
