// Package longterm keeps long-term memories: PII-scrubbed texts with their
// embeddings and metadata (thread, channel, source, URI, kind, created, last
// accessed), searched by relevance and recency together.
//
// Two stores implement Store with the same behaviour, checked by one
// conformance suite (package longtermtest): Postgres with pgvector
// (DATABASE_URL; HNSW index, cosine distance, migrations applied at start) and
// an embedded, persisted chromem-go store under $RELAY_DATA_DIR/memory, the
// default when no database is configured.
//
// # Scoring
//
// A hit's score mixes relevance and recency:
//
//	score = 0.85 * cosine_similarity + 0.15 * 0.5^(age / 30 days)
//
// where age is the time since the memory was created (Scoring changes the
// weights and the half-life). Stores first take the nearest candidates by
// cosine distance (at least 4*k, at least 40), then rank them by score; a
// filter on thread, channel or kind is applied during the index scan
// (pgvector's iterative scans), so it does not starve the results.
package longterm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/relaystation/relay/memory/embed"
)

// Kinds of memories.
const (
	// KindNote is a remembered fact or statement (the default).
	KindNote = "note"
	// KindDoc is a document reference with a URI, returned by retrieve_docs.
	KindDoc = "doc"
)

// Memory is one stored memory, without its vector.
type Memory struct {
	// ID is unique; upserting an existing id replaces the memory.
	ID string `json:"id"`
	// Text is the (scrubbed) text.
	Text string `json:"text"`
	// Thread, Channel and Source say where it came from (Source is free text,
	// e.g. "github:issues.opened" or "cli").
	Thread  string `json:"thread,omitempty"`
	Channel string `json:"channel,omitempty"`
	Source  string `json:"source,omitempty"`
	// URI locates the original (a document, an issue); may be empty.
	URI string `json:"uri,omitempty"`
	// Kind is KindNote or KindDoc; empty means KindNote.
	Kind string `json:"kind,omitempty"`
	// Created is when the memory was made; LastAccessed when a search last
	// returned it with Query.Touch.
	Created      time.Time `json:"created"`
	LastAccessed time.Time `json:"last_accessed"`
}

// Record is a memory with its embedding.
type Record struct {
	Memory
	Vector []float32
}

// Query is a search.
type Query struct {
	// Vector is the query embedding. Required.
	Vector []float32
	// K is how many hits to return. Default 5.
	K int
	// Thread, Channel and Kind, when set, restrict the search to equal values.
	Thread, Channel, Kind string
	// Now is the reference time for recency; zero means time.Now().
	Now time.Time
	// Touch sets the hits' LastAccessed to Now.
	Touch bool
}

// Hit is a search result.
type Hit struct {
	Memory
	// Similarity is the cosine similarity with the query, in [-1, 1].
	Similarity float64 `json:"similarity"`
	// Recency is 0.5^(age/half-life), in (0, 1].
	Recency float64 `json:"recency"`
	// Score is the ranking score (see the package comment).
	Score float64 `json:"score"`
}

// Filter selects memories to delete. At least one field must be set.
type Filter struct {
	Thread string
	IDs    []string
}

// Store keeps long-term memories. Implementations are safe for concurrent use.
type Store interface {
	// Upsert inserts or replaces memories by id. A vector of the wrong length
	// is an *embed.DimensionError.
	Upsert(ctx context.Context, recs ...Record) error
	// Search returns up to q.K hits ordered by Score, best first.
	Search(ctx context.Context, q Query) ([]Hit, error)
	// Delete removes the memories matching f and returns how many.
	Delete(ctx context.Context, f Filter) (int, error)
	// Count returns the number of stored memories.
	Count(ctx context.Context) (int, error)
	// Dimensions is the vector length the store holds.
	Dimensions() int
	// Close releases the store.
	Close() error
}

// Scoring weighs relevance against recency.
type Scoring struct {
	// Relevance weighs cosine similarity. Default 0.85.
	Relevance float64
	// Recency weighs 0.5^(age/HalfLife). Default 0.15.
	Recency float64
	// HalfLife is the age at which recency is 0.5. Default 30 days.
	HalfLife time.Duration
}

// DefaultScoring is the documented weighting.
var DefaultScoring = Scoring{Relevance: 0.85, Recency: 0.15, HalfLife: 30 * 24 * time.Hour}

func (s *Scoring) setDefaults() {
	if s.Relevance == 0 && s.Recency == 0 {
		s.Relevance, s.Recency = DefaultScoring.Relevance, DefaultScoring.Recency
	}
	if s.HalfLife <= 0 {
		s.HalfLife = DefaultScoring.HalfLife
	}
}

// Score computes a hit's recency and score from its similarity and creation time.
func (s Scoring) Score(similarity float64, created, now time.Time) (recency, score float64) {
	s.setDefaults()
	age := max(now.Sub(created), 0)
	recency = math.Exp2(-float64(age) / float64(s.HalfLife))
	return recency, s.Relevance*similarity + s.Recency*recency
}

// rank scores candidates and keeps the best k.
func (s Scoring) rank(hits []Hit, now time.Time, k int) []Hit {
	for i := range hits {
		hits[i].Recency, hits[i].Score = s.Score(hits[i].Similarity, hits[i].Created, now)
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].ID < hits[j].ID
	})
	if len(hits) > k {
		hits = hits[:k]
	}
	return hits
}

// candidates is how many nearest neighbours are re-ranked for k hits.
func candidates(k int) int { return max(4*k, 40) }

func (q *Query) setDefaults() {
	if q.K <= 0 {
		q.K = 5
	}
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
}

// ErrEmptyFilter is returned by Delete with nothing to select.
var ErrEmptyFilter = errors.New("longterm: delete needs a thread or ids")

// ErrNoVector is returned by Search without a query vector and by Upsert for a
// record without one.
var ErrNoVector = errors.New("longterm: no vector")

// checkVector reports a missing vector, or one whose length is not the
// store's dims; where names the store in the error.
func checkVector(v []float32, dims int, where string) error {
	if len(v) == 0 {
		return ErrNoVector
	}
	if len(v) != dims {
		return &embed.DimensionError{Where: where, Want: dims, Got: len(v)}
	}
	return nil
}

// checkRecords reports the first record without an id or with a bad vector.
func checkRecords(recs []Record, dims int, where string) error {
	for _, r := range recs {
		if r.ID == "" {
			return errors.New("longterm: record without id")
		}
		if err := checkVector(r.Vector, dims, where); err != nil {
			return fmt.Errorf("record %s: %w", r.ID, err)
		}
	}
	return nil
}
