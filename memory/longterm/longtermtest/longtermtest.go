// Package longtermtest is the conformance suite every longterm.Store passes:
// the Postgres + pgvector store and the embedded store run the same tests.
package longtermtest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/memory/longterm"
)

// Dims is the vector length the suite uses.
const Dims = 16

// Opener opens a store on one backing storage (a schema, a directory) with
// the given dimensions; opening again reaches the same data.
type Opener func(dims int) (longterm.Store, error)

// Factory returns an Opener on fresh, empty storage for one test.
type Factory func(t *testing.T) Opener

// Run runs the conformance suite.
func Run(t *testing.T, newStorage Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"UpsertSearch", testUpsertSearch},
		{"UpsertReplaces", testUpsertReplaces},
		{"Filters", testFilters},
		{"FilterDoesNotStarve", testFilterDoesNotStarve},
		{"Recency", testRecency},
		{"Touch", testTouch},
		{"Delete", testDelete},
		{"Dimensions", testDimensions},
		{"Persistence", testPersistence},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newStorage(t))
		})
	}
}

func mustOpen(t *testing.T, open Opener) longterm.Store {
	t.Helper()
	s, err := open(Dims)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// axis returns a unit vector along dimension i, tilted by eps towards i+1.
func axis(i int, eps float64) []float32 {
	v := make([]float32, Dims)
	v[i%Dims] = float32(math.Cos(eps))
	v[(i+1)%Dims] = float32(math.Sin(eps))
	return v
}

func randVec(r *rand.Rand) []float32 {
	v := make([]float32, Dims)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func rec(id string, v []float32, thread string) longterm.Record {
	return longterm.Record{Memory: longterm.Memory{ID: id, Text: "text " + id, Thread: thread, Channel: "github",
		Source: "test", Created: time.Now().Add(-time.Hour)}, Vector: v}
}

func upsert(t *testing.T, s longterm.Store, recs ...longterm.Record) {
	t.Helper()
	if err := s.Upsert(t.Context(), recs...); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
}

func search(t *testing.T, s longterm.Store, q longterm.Query) []longterm.Hit {
	t.Helper()
	hits, err := s.Search(t.Context(), q)
	if err != nil {
		t.Fatalf("Search: %v", err)
	}
	return hits
}

func ids(hits []longterm.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.ID
	}
	return out
}

func testUpsertSearch(t *testing.T, open Opener) {
	s := mustOpen(t, open)
	if hits := search(t, s, longterm.Query{Vector: axis(0, 0), K: 3}); len(hits) != 0 {
		t.Fatalf("empty store: got %d hits, want 0", len(hits))
	}
	created := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Millisecond)
	r := rec("near", axis(0, 0.1), "github:a/b#1")
	r.URI, r.Kind, r.Created = "https://example.com/doc", longterm.KindDoc, created
	upsert(t, s, r, rec("mid", axis(0, 0.6), "github:a/b#1"), rec("far", axis(5, 0), "github:a/b#2"))
	hits := search(t, s, longterm.Query{Vector: axis(0, 0), K: 2})
	if got := ids(hits); len(got) != 2 || got[0] != "near" || got[1] != "mid" {
		t.Fatalf("got hits %v, want [near mid]", got)
	}
	h := hits[0]
	if h.Text != "text near" || h.Thread != "github:a/b#1" || h.Channel != "github" || h.Source != "test" ||
		h.URI != "https://example.com/doc" || h.Kind != longterm.KindDoc || !h.Created.Equal(created) {
		t.Fatalf("hit fields: got %+v", h.Memory)
	}
	if want := math.Cos(0.1); math.Abs(h.Similarity-want) > 1e-4 {
		t.Fatalf("similarity: got %f, want %f", h.Similarity, want)
	}
	rc, sc := longterm.DefaultScoring.Score(h.Similarity, h.Created, time.Now())
	if math.Abs(h.Recency-rc) > 1e-3 || math.Abs(h.Score-sc) > 1e-3 {
		t.Fatalf("score: got recency %f score %f, want %f %f", h.Recency, h.Score, rc, sc)
	}
	if all := search(t, s, longterm.Query{Vector: axis(0, 0), K: 50}); len(all) != 3 {
		t.Fatalf("k beyond count: got %d hits, want 3", len(all))
	}
	if n, err := s.Count(t.Context()); err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3", n, err)
	}
	if _, err := s.Search(t.Context(), longterm.Query{K: 1}); !errors.Is(err, longterm.ErrNoVector) {
		t.Fatalf("Search without vector: got %v, want ErrNoVector", err)
	}
}

func testUpsertReplaces(t *testing.T, open Opener) {
	s := mustOpen(t, open)
	upsert(t, s, rec("a", axis(0, 0), ""))
	r := rec("a", axis(3, 0), "github:x/y#1")
	r.Text = "replaced"
	upsert(t, s, r)
	if n, _ := s.Count(t.Context()); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
	hits := search(t, s, longterm.Query{Vector: axis(3, 0), K: 1})
	if len(hits) != 1 || hits[0].Text != "replaced" || hits[0].Thread != "github:x/y#1" || hits[0].Similarity < 0.99 {
		t.Fatalf("got %+v, want the replaced memory with its new vector", hits)
	}
}

func testFilters(t *testing.T, open Opener) {
	s := mustOpen(t, open)
	a := rec("a", axis(0, 0), "slack:T/C/1")
	a.Channel = "slack"
	b := rec("b", axis(0, 0.2), "github:o/r#1")
	c := rec("c", axis(0, 0.3), "github:o/r#2")
	c.Kind, c.URI = longterm.KindDoc, "https://docs/x"
	upsert(t, s, a, b, c)
	for _, tt := range []struct {
		name string
		q    longterm.Query
		want []string
	}{
		{"thread", longterm.Query{Thread: "github:o/r#1"}, []string{"b"}},
		{"channel", longterm.Query{Channel: "github"}, []string{"b", "c"}},
		{"kind", longterm.Query{Kind: longterm.KindDoc}, []string{"c"}},
		{"thread and channel", longterm.Query{Thread: "slack:T/C/1", Channel: "github"}, nil},
	} {
		tt.q.Vector, tt.q.K = axis(0, 0), 10
		got := ids(search(t, s, tt.q))
		if fmt.Sprint(got) != fmt.Sprint(tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// testFilterDoesNotStarve stores many memories of one thread close to the
// query and a few of another thread far from it: a filtered search must still
// return k hits of the other thread.
func testFilterDoesNotStarve(t *testing.T, open Opener) {
	s := mustOpen(t, open)
	r := rand.New(rand.NewPCG(1, 2))
	var recs []longterm.Record
	for i := range 400 {
		v := axis(0, 0.05+0.3*r.Float64())
		recs = append(recs, rec(fmt.Sprintf("busy-%d", i), v, "busy"))
	}
	for i := range 8 {
		recs = append(recs, rec(fmt.Sprintf("quiet-%d", i), randVec(r), "quiet"))
	}
	upsert(t, s, recs...)
	hits := search(t, s, longterm.Query{Vector: axis(0, 0), K: 5, Thread: "quiet"})
	if len(hits) != 5 {
		t.Fatalf("got %d hits of thread quiet, want 5 (%v)", len(hits), ids(hits))
	}
	for _, h := range hits {
		if h.Thread != "quiet" {
			t.Fatalf("hit %s of thread %s, want quiet", h.ID, h.Thread)
		}
	}
}

func testRecency(t *testing.T, open Opener) {
	s := mustOpen(t, open)
	now := time.Now()
	old := rec("old", axis(0, 0), "")
	old.Created = now.Add(-90 * 24 * time.Hour)
	fresh := rec("fresh", axis(0, 0.05), "")
	fresh.Created = now.Add(-time.Minute)
	upsert(t, s, old, fresh)
	hits := search(t, s, longterm.Query{Vector: axis(0, 0), K: 2, Now: now})
	if got := ids(hits); len(got) != 2 || got[0] != "fresh" {
		t.Fatalf("got %v, want the fresh memory first (slightly less similar, 90 days younger)", got)
	}
	if hits[1].Recency > 0.13 || hits[1].Recency < 0.12 {
		t.Fatalf("recency of a 90-day-old memory: got %f, want 0.125 (three half-lives)", hits[1].Recency)
	}
}

func testTouch(t *testing.T, open Opener) {
	s := mustOpen(t, open)
	upsert(t, s, rec("a", axis(0, 0), ""))
	at := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	hits := search(t, s, longterm.Query{Vector: axis(0, 0), K: 1, Now: at, Touch: true})
	if len(hits) != 1 || !hits[0].LastAccessed.Equal(at) {
		t.Fatalf("touched hit: got %+v, want last accessed %s", hits, at)
	}
	again := search(t, s, longterm.Query{Vector: axis(0, 0), K: 1})
	if len(again) != 1 || !again[0].LastAccessed.Equal(at) {
		t.Fatalf("after touch: got last accessed %v, want %s", again[0].LastAccessed, at)
	}
}

func testDelete(t *testing.T, open Opener) {
	s := mustOpen(t, open)
	upsert(t, s, rec("a", axis(0, 0), "t1"), rec("b", axis(1, 0), "t1"), rec("c", axis(2, 0), "t2"))
	ctx := t.Context()
	if _, err := s.Delete(ctx, longterm.Filter{}); !errors.Is(err, longterm.ErrEmptyFilter) {
		t.Fatalf("Delete with an empty filter: got %v, want ErrEmptyFilter", err)
	}
	if n, err := s.Delete(ctx, longterm.Filter{Thread: "t1"}); err != nil || n != 2 {
		t.Fatalf("Delete thread t1 = %d, %v; want 2", n, err)
	}
	if n, err := s.Delete(ctx, longterm.Filter{IDs: []string{"c", "missing"}}); err != nil || n != 1 {
		t.Fatalf("Delete ids = %d, %v; want 1", n, err)
	}
	if n, _ := s.Count(ctx); n != 0 {
		t.Fatalf("Count = %d, want 0", n)
	}
}

func testDimensions(t *testing.T, open Opener) {
	s := mustOpen(t, open)
	if s.Dimensions() != Dims {
		t.Fatalf("Dimensions = %d, want %d", s.Dimensions(), Dims)
	}
	var de *embed.DimensionError
	err := s.Upsert(t.Context(), longterm.Record{Memory: longterm.Memory{ID: "x", Text: "x"}, Vector: make([]float32, Dims+1)})
	if !errors.As(err, &de) || de.Want != Dims || de.Got != Dims+1 {
		t.Fatalf("Upsert of a %d-vector: got %v, want a DimensionError %d vs %d", Dims+1, err, Dims, Dims+1)
	}
	if _, err := s.Search(t.Context(), longterm.Query{Vector: make([]float32, 3)}); !errors.As(err, &de) {
		t.Fatalf("Search with a 3-vector: got %v, want a DimensionError", err)
	}
	other, err := open(2 * Dims)
	if err == nil {
		_ = other.Close()
		t.Fatalf("reopen with %d dimensions: got nil error, want a DimensionError", 2*Dims)
	}
	if !errors.As(err, &de) || de.Want != Dims || de.Got != 2*Dims {
		t.Fatalf("reopen with %d dimensions: got %v, want a DimensionError saying %d vs %d", 2*Dims, err, Dims, 2*Dims)
	}
}

func testPersistence(t *testing.T, open Opener) {
	s := mustOpen(t, open)
	upsert(t, s, rec("kept", axis(4, 0), "t"))
	_ = s.Close()
	again := mustOpen(t, open)
	hits := search(t, again, longterm.Query{Vector: axis(4, 0), K: 1})
	if len(hits) != 1 || hits[0].ID != "kept" {
		t.Fatalf("after reopening: got %v, want [kept]", ids(hits))
	}
}
