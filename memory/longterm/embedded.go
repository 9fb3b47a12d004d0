package longterm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/philippgille/chromem-go"

	"github.com/relaystation/relay/memory/embed"
)

// EmbeddedConfig configures the embedded store.
type EmbeddedConfig struct {
	// Dir is where the store persists ($RELAY_DATA_DIR/memory). Required.
	Dir string
	// Dimensions is the embedding length; a collection made with another
	// length is a *embed.DimensionError at start. Required.
	Dimensions int
	// Scoring weighs relevance and recency; zero means DefaultScoring.
	Scoring Scoring
}

// Embedded keeps memories in a chromem-go database persisted under Dir (one
// gob file per memory). Search is an exact scan over all memories of the
// collection, fine for the thousands of memories of a single-process relay;
// use Postgres beyond that. It is safe for concurrent use within one process;
// two processes must not open the same Dir.
type Embedded struct {
	cfg EmbeddedConfig
	db  *chromem.DB
	col *chromem.Collection
}

const embeddedCollection = "memories"

// NewEmbedded opens (or creates) the store under cfg.Dir.
func NewEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Dir == "" || cfg.Dimensions <= 0 {
		return nil, fmt.Errorf("embedded memory: dir %q and dimensions %d are required", cfg.Dir, cfg.Dimensions)
	}
	cfg.Scoring.setDefaults()
	db, err := chromem.NewPersistentDB(cfg.Dir, false)
	if err != nil {
		return nil, fmt.Errorf("embedded memory at %s: %w", cfg.Dir, err)
	}
	noEmbed := func(context.Context, string) ([]float32, error) {
		return nil, errors.New("embedded memory: vectors must be supplied")
	}
	dims := strconv.Itoa(cfg.Dimensions)
	col, err := db.GetOrCreateCollection(embeddedCollection, map[string]string{"dimensions": dims}, noEmbed)
	if err != nil {
		return nil, fmt.Errorf("embedded memory at %s: %w", cfg.Dir, err)
	}
	// chromem does not expose a collection's metadata; the dimension is
	// recorded beside it.
	mark := filepath.Join(cfg.Dir, "relay-memory-dimensions")
	have, err := os.ReadFile(mark)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.WriteFile(mark, []byte(dims+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("embedded memory at %s: %w", cfg.Dir, err)
		}
	case err != nil:
		return nil, fmt.Errorf("embedded memory at %s: %w", cfg.Dir, err)
	case strings.TrimSpace(string(have)) != dims:
		n, _ := strconv.Atoi(strings.TrimSpace(string(have)))
		return nil, &embed.DimensionError{Where: "collection " + embeddedCollection + " in " + cfg.Dir, Want: n, Got: cfg.Dimensions}
	}
	return &Embedded{cfg: cfg, db: db, col: col}, nil
}

// Dimensions implements Store.
func (e *Embedded) Dimensions() int { return e.cfg.Dimensions }

// Close implements Store; every write is already on disk.
func (e *Embedded) Close() error { return nil }

func toMeta(m Memory) map[string]string {
	return map[string]string{
		"thread": m.Thread, "channel": m.Channel, "source": m.Source, "uri": m.URI, "kind": m.Kind,
		"created": m.Created.UTC().Format(time.RFC3339Nano), "last_accessed": m.LastAccessed.UTC().Format(time.RFC3339Nano),
	}
}

func fromDoc(id, content string, md map[string]string) Memory {
	m := Memory{ID: id, Text: content, Thread: md["thread"], Channel: md["channel"], Source: md["source"], URI: md["uri"], Kind: md["kind"]}
	m.Created, _ = time.Parse(time.RFC3339Nano, md["created"])
	m.LastAccessed, _ = time.Parse(time.RFC3339Nano, md["last_accessed"])
	return m
}

// Upsert implements Store.
func (e *Embedded) Upsert(ctx context.Context, recs ...Record) error {
	if err := checkRecords(recs, e.cfg.Dimensions, "collection "+embeddedCollection); err != nil {
		return err
	}
	for _, r := range recs {
		defaults(&r)
		if old, err := e.col.GetByID(ctx, r.ID); err == nil {
			// An upsert keeps the original creation and access times, as Postgres does.
			prev := fromDoc(old.ID, old.Content, old.Metadata)
			r.Created, r.LastAccessed = prev.Created, prev.LastAccessed
		}
		vec := append([]float32(nil), r.Vector...)
		doc := chromem.Document{ID: r.ID, Metadata: toMeta(r.Memory), Embedding: vec, Content: r.Text}
		if err := e.col.AddDocument(ctx, doc); err != nil {
			return fmt.Errorf("upsert memory %s: %w", r.ID, err)
		}
	}
	return nil
}

// Search implements Store.
func (e *Embedded) Search(ctx context.Context, q Query) ([]Hit, error) {
	q.setDefaults()
	if err := checkVector(q.Vector, e.cfg.Dimensions, "collection "+embeddedCollection); err != nil {
		return nil, err
	}
	n := min(candidates(q.K), e.col.Count())
	if n == 0 {
		return nil, nil
	}
	where := map[string]string{}
	for k, v := range map[string]string{"thread": q.Thread, "channel": q.Channel, "kind": q.Kind} {
		if v != "" {
			where[k] = v
		}
	}
	if len(where) == 0 {
		where = nil
	}
	res, err := e.col.QueryEmbedding(ctx, append([]float32(nil), q.Vector...), n, where, nil)
	if err != nil {
		return nil, fmt.Errorf("search memories: %w", err)
	}
	hits := make([]Hit, 0, len(res))
	for _, r := range res {
		hits = append(hits, Hit{Memory: fromDoc(r.ID, r.Content, r.Metadata), Similarity: float64(r.Similarity)})
	}
	hits = e.cfg.Scoring.rank(hits, q.Now, q.K)
	if q.Touch {
		for i := range hits {
			doc, err := e.col.GetByID(ctx, hits[i].ID)
			if err != nil {
				continue // deleted meanwhile
			}
			hits[i].LastAccessed = q.Now
			m := fromDoc(doc.ID, doc.Content, doc.Metadata)
			m.LastAccessed = q.Now
			doc.Metadata = toMeta(m)
			if err := e.col.AddDocument(ctx, doc); err != nil {
				return nil, fmt.Errorf("touch memory %s: %w", doc.ID, err)
			}
		}
	}
	return hits, nil
}

// Delete implements Store.
func (e *Embedded) Delete(ctx context.Context, f Filter) (int, error) {
	if f.Thread == "" && len(f.IDs) == 0 {
		return 0, ErrEmptyFilter
	}
	before := e.col.Count()
	var err error
	switch {
	case len(f.IDs) > 0:
		var ids []string
		for _, id := range f.IDs {
			doc, gerr := e.col.GetByID(ctx, id)
			if gerr == nil && (f.Thread == "" || doc.Metadata["thread"] == f.Thread) {
				ids = append(ids, id)
			}
		}
		if len(ids) > 0 {
			err = e.col.Delete(ctx, nil, nil, ids...)
		}
	default:
		err = e.col.Delete(ctx, map[string]string{"thread": f.Thread}, nil)
	}
	if err != nil {
		return 0, fmt.Errorf("delete memories: %w", err)
	}
	return before - e.col.Count(), nil
}

// Count implements Store.
func (e *Embedded) Count(context.Context) (int, error) { return e.col.Count(), nil }
