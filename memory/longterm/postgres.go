package longterm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"

	"github.com/relaystation/relay/memory/embed"
)

// PostgresConfig configures the Postgres + pgvector store.
type PostgresConfig struct {
	// URL is the connection string (DATABASE_URL). Required.
	URL string
	// Schema, when set, is put first on the search_path (followed by public,
	// where the vector extension lives); the tables are created there. Tests
	// use a schema per test.
	Schema string
	// Dimensions is the embedding length (RELAY_MEMORY_DIMENSIONS). The table
	// is created with it; an existing table with another length is a
	// *embed.DimensionError at start. Required.
	Dimensions int
	// EfSearch is hnsw.ef_search, the size of the HNSW candidate list per
	// search (RELAY_MEMORY_EF_SEARCH). Default 100.
	EfSearch int
	// M and EfConstruction build the HNSW index. Defaults 16 and 64.
	M, EfConstruction int
	// MaxConns bounds the pool. Default 8.
	MaxConns int32
	// Scoring weighs relevance and recency; zero means DefaultScoring.
	Scoring Scoring
	// Logger; nil discards.
	Logger *slog.Logger
}

// Postgres keeps memories in the table "memories" with an HNSW index
// (vector_cosine_ops). It is safe for concurrent use.
type Postgres struct {
	cfg       PostgresConfig
	pool      *pgxpool.Pool
	log       *slog.Logger
	version   string
	iterative bool
}

// migrations are applied in order, each once, recorded in schema_migrations.
// %[1]d is the dimension, %[2]d m, %[3]d ef_construction.
var migrations = []string{
	`CREATE TABLE memories (
		id            text PRIMARY KEY,
		text          text NOT NULL,
		thread        text NOT NULL DEFAULT '',
		channel       text NOT NULL DEFAULT '',
		source        text NOT NULL DEFAULT '',
		uri           text NOT NULL DEFAULT '',
		kind          text NOT NULL DEFAULT 'note',
		created       timestamptz NOT NULL,
		last_accessed timestamptz NOT NULL,
		embedding     vector(%[1]d) NOT NULL
	);
	CREATE INDEX memories_thread_idx ON memories (thread);
	CREATE INDEX memories_channel_idx ON memories (channel);`,
	`CREATE INDEX memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops) WITH (m = %[2]d, ef_construction = %[3]d);`,
}

// NewPostgres connects, checks pgvector, applies migrations and checks the
// table's dimension. The caller must Close it.
func NewPostgres(ctx context.Context, cfg PostgresConfig) (*Postgres, error) {
	if cfg.Dimensions <= 0 {
		return nil, fmt.Errorf("postgres memory: dimensions %d must be positive", cfg.Dimensions)
	}
	if cfg.EfSearch <= 0 {
		cfg.EfSearch = 100
	}
	if cfg.M <= 0 {
		cfg.M = 16
	}
	if cfg.EfConstruction <= 0 {
		cfg.EfConstruction = 64
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 8
	}
	cfg.Scoring.setDefaults()
	p := &Postgres{cfg: cfg, log: cfg.Logger}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if cfg.Schema != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{cfg.Schema}.Sanitize() + ", public"
	}
	pc.MaxConns = cfg.MaxConns
	if pc.ConnConfig.ConnectTimeout == 0 || pc.ConnConfig.ConnectTimeout > 5*time.Second {
		pc.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if err := p.prepare(ctx, pc.ConnConfig.Copy()); err != nil {
		return nil, err
	}
	efSearch := cfg.EfSearch
	iterative := p.iterative
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if err := pgxvec.RegisterTypes(ctx, c); err != nil {
			return fmt.Errorf("register pgvector types: %w", err)
		}
		set := "SET hnsw.ef_search = " + strconv.Itoa(efSearch)
		if iterative {
			// Keep scanning the index until enough rows pass the WHERE filter.
			set += "; SET hnsw.iterative_scan = relaxed_order"
		}
		_, err := c.Exec(ctx, set)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres memory: %w", err)
	}
	p.pool = pool
	return p, nil
}

// prepare checks the extension, migrates and checks the dimension on one
// plain connection.
func (p *Postgres) prepare(ctx context.Context, cc *pgx.ConnConfig) error {
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("postgres memory: connect: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if err := c.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&p.version); err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres memory: check pgvector: %w", err)
		}
		if _, err := c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS vector"); err != nil {
			return fmt.Errorf("postgres memory: the pgvector extension is not installed and cannot be created (%w); "+
				"install pgvector and run CREATE EXTENSION vector (scripts/setup.sh does)", err)
		}
		if err := c.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&p.version); err != nil {
			return fmt.Errorf("postgres memory: check pgvector: %w", err)
		}
	}
	p.iterative = versionAtLeast(p.version, 0, 8)
	if !p.iterative {
		p.log.Warn("pgvector is older than 0.8: no iterative index scans; filtered searches use a larger candidate list and may return fewer hits",
			"pgvector", p.version)
	}
	if err := p.migrate(ctx, c); err != nil {
		return err
	}
	var typmod int
	err = c.QueryRow(ctx, `SELECT a.atttypmod FROM pg_attribute a
		WHERE a.attrelid = 'memories'::regclass AND a.attname = 'embedding'`).Scan(&typmod)
	if err != nil {
		return fmt.Errorf("postgres memory: read embedding dimension: %w", err)
	}
	if typmod != p.cfg.Dimensions {
		return &embed.DimensionError{Where: "table memories", Want: typmod, Got: p.cfg.Dimensions}
	}
	return nil
}

func (p *Postgres) migrate(ctx context.Context, c *pgx.Conn) error {
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres memory: migrate: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	h := fnv.New64a()
	_, _ = h.Write([]byte("relay-memory-migrations:" + p.cfg.Schema))
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(h.Sum64())); err != nil {
		return fmt.Errorf("postgres memory: migration lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("postgres memory: schema_migrations: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&have); err != nil {
		return fmt.Errorf("postgres memory: read schema_migrations: %w", err)
	}
	for v := have + 1; v <= len(migrations); v++ {
		sql := fmt.Sprintf(migrations[v-1], p.cfg.Dimensions, p.cfg.M, p.cfg.EfConstruction)
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("postgres memory: migration %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", v); err != nil {
			return fmt.Errorf("postgres memory: record migration %d: %w", v, err)
		}
		p.log.Info("memory migration applied", "version", v)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres memory: migrate: %w", err)
	}
	return nil
}

func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// Version is the installed pgvector version; IterativeScan whether filtered
// searches use iterative index scans (pgvector >= 0.8).
func (p *Postgres) Version() string     { return p.version }
func (p *Postgres) IterativeScan() bool { return p.iterative }

// Pool is the connection pool (benchmarks and tests use it).
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

// Dimensions implements Store.
func (p *Postgres) Dimensions() int { return p.cfg.Dimensions }

// Close closes the pool.
func (p *Postgres) Close() error { p.pool.Close(); return nil }

// Ping checks the database, for readiness checks.
func (p *Postgres) Ping(ctx context.Context) error { return p.pool.Ping(ctx) }

func (p *Postgres) check(recs []Record) error {
	return checkRecords(recs, p.cfg.Dimensions, "table memories")
}

func defaults(r *Record) {
	if r.Kind == "" {
		r.Kind = KindNote
	}
	if r.Created.IsZero() {
		r.Created = time.Now()
	}
	if r.LastAccessed.IsZero() {
		r.LastAccessed = r.Created
	}
}

// Upsert implements Store.
func (p *Postgres) Upsert(ctx context.Context, recs ...Record) error {
	if err := p.check(recs); err != nil {
		return err
	}
	batch := &pgx.Batch{}
	for _, r := range recs {
		defaults(&r)
		batch.Queue(`INSERT INTO memories (id, text, thread, channel, source, uri, kind, created, last_accessed, embedding)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (id) DO UPDATE SET text = EXCLUDED.text, thread = EXCLUDED.thread, channel = EXCLUDED.channel,
				source = EXCLUDED.source, uri = EXCLUDED.uri, kind = EXCLUDED.kind, embedding = EXCLUDED.embedding`,
			r.ID, r.Text, r.Thread, r.Channel, r.Source, r.URI, r.Kind, r.Created, r.LastAccessed, pgvector.NewVector(r.Vector))
	}
	if err := p.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("upsert %d memories: %w", len(recs), err)
	}
	return nil
}

// CopyFrom bulk-loads records with COPY (no upsert: ids must be new). It is
// for imports and benchmarks.
func (p *Postgres) CopyFrom(ctx context.Context, recs []Record) (int64, error) {
	if err := p.check(recs); err != nil {
		return 0, err
	}
	cols := []string{"id", "text", "thread", "channel", "source", "uri", "kind", "created", "last_accessed", "embedding"}
	n, err := p.pool.CopyFrom(ctx, pgx.Identifier{"memories"}, cols, pgx.CopyFromSlice(len(recs), func(i int) ([]any, error) {
		r := recs[i]
		defaults(&r)
		return []any{r.ID, r.Text, r.Thread, r.Channel, r.Source, r.URI, r.Kind, r.Created, r.LastAccessed, pgvector.NewVector(r.Vector)}, nil
	}))
	if err != nil {
		return n, fmt.Errorf("copy %d memories: %w", len(recs), err)
	}
	return n, nil
}

// DropIndex and CreateIndex drop and (re)build the HNSW index, for bulk loads
// (building once after a COPY is much faster than inserting into the index).
func (p *Postgres) DropIndex(ctx context.Context) error {
	_, err := p.pool.Exec(ctx, "DROP INDEX IF EXISTS memories_embedding_hnsw")
	return err
}

// CreateIndex builds the HNSW index if it is missing.
func (p *Postgres) CreateIndex(ctx context.Context) error {
	_, err := p.pool.Exec(ctx, fmt.Sprintf("CREATE INDEX IF NOT EXISTS memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops) WITH (m = %d, ef_construction = %d)",
		p.cfg.M, p.cfg.EfConstruction))
	return err
}

// Search implements Store.
func (p *Postgres) Search(ctx context.Context, q Query) ([]Hit, error) {
	q.setDefaults()
	if err := checkVector(q.Vector, p.cfg.Dimensions, "table memories"); err != nil {
		return nil, err
	}
	where, args := filterSQL(q, pgvector.NewVector(q.Vector))
	n := candidates(q.K)
	if !p.iterative && len(args) > 1 {
		n *= 10 // without iterative scans a filter can starve the candidate list
	}
	args = append(args, n)
	sql := `SELECT id, text, thread, channel, source, uri, kind, created, last_accessed, 1 - (embedding <=> $1) AS sim
		FROM memories` + where + ` ORDER BY embedding <=> $1 LIMIT $` + strconv.Itoa(len(args))
	hits, err := p.query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("search memories: %w", err)
	}
	hits = p.cfg.Scoring.rank(hits, q.Now, q.K)
	if q.Touch && len(hits) > 0 {
		ids := make([]string, len(hits))
		for i := range hits {
			ids[i] = hits[i].ID
			hits[i].LastAccessed = q.Now
		}
		if _, err := p.pool.Exec(ctx, "UPDATE memories SET last_accessed = $1 WHERE id = ANY($2)", q.Now, ids); err != nil {
			return nil, fmt.Errorf("touch memories: %w", err)
		}
	}
	return hits, nil
}

// ExactSearch is Search without the HNSW index (a sequential scan computing
// every distance): the ground truth for recall measurements.
func (p *Postgres) ExactSearch(ctx context.Context, q Query) ([]Hit, error) {
	q.setDefaults()
	where, args := filterSQL(q, pgvector.NewVector(q.Vector))
	args = append(args, q.K)
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SET LOCAL enable_indexscan = off"); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT id, text, thread, channel, source, uri, kind, created, last_accessed, 1 - (embedding <=> $1) AS sim
		FROM memories`+where+` ORDER BY embedding <=> $1 LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, err
	}
	return scanHits(rows)
}

func filterSQL(q Query, vec pgvector.Vector) (string, []any) {
	args := []any{vec}
	var conds []string
	for _, f := range []struct{ col, val string }{{"thread", q.Thread}, {"channel", q.Channel}, {"kind", q.Kind}} {
		if f.val != "" {
			args = append(args, f.val)
			conds = append(conds, f.col+" = $"+strconv.Itoa(len(args)))
		}
	}
	if len(conds) == 0 {
		return "", args
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

func (p *Postgres) query(ctx context.Context, sql string, args ...any) ([]Hit, error) {
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return scanHits(rows)
}

func scanHits(rows pgx.Rows) ([]Hit, error) {
	defer rows.Close()
	var hits []Hit
	for rows.Next() {
		var h Hit
		if err := rows.Scan(&h.ID, &h.Text, &h.Thread, &h.Channel, &h.Source, &h.URI, &h.Kind, &h.Created, &h.LastAccessed, &h.Similarity); err != nil {
			return nil, err
		}
		hits = append(hits, h)
	}
	return hits, rows.Err()
}

// Delete implements Store.
func (p *Postgres) Delete(ctx context.Context, f Filter) (int, error) {
	var tag interface{ RowsAffected() int64 }
	var err error
	switch {
	case f.Thread != "" && len(f.IDs) > 0:
		tag, err = p.pool.Exec(ctx, "DELETE FROM memories WHERE thread = $1 AND id = ANY($2)", f.Thread, f.IDs)
	case f.Thread != "":
		tag, err = p.pool.Exec(ctx, "DELETE FROM memories WHERE thread = $1", f.Thread)
	case len(f.IDs) > 0:
		tag, err = p.pool.Exec(ctx, "DELETE FROM memories WHERE id = ANY($1)", f.IDs)
	default:
		return 0, ErrEmptyFilter
	}
	if err != nil {
		return 0, fmt.Errorf("delete memories: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Count implements Store.
func (p *Postgres) Count(ctx context.Context) (int, error) {
	var n int
	if err := p.pool.QueryRow(ctx, "SELECT count(*) FROM memories").Scan(&n); err != nil {
		return 0, fmt.Errorf("count memories: %w", err)
	}
	return n, nil
}
