package longterm_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/longterm/longtermtest"
)

func databaseURL() string {
	return testenv.Getenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
}

// testSchema creates a schema unique to the test, dropped at its end.
func testSchema(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	c, err := pgx.Connect(ctx, databaseURL())
	if err != nil {
		testenv.Missing(t, "postgres at %s: %v (start PostgreSQL with pgvector, see scripts/setup.sh)", databaseURL(), err)
	}
	defer c.Close(context.Background())
	schema := "t_" + uuid.NewString()[:8]
	if _, err := c.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	var ext string
	if err := c.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname='vector'").Scan(&ext); err != nil {
		testenv.Missing(t, "pgvector in database test: %v (run scripts/setup.sh)", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), databaseURL())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			_ = c.Close(context.Background())
		}
	})
	return schema
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	longtermtest.Run(t, func(t *testing.T) longtermtest.Opener {
		schema := testSchema(t)
		return func(dims int) (longterm.Store, error) {
			return longterm.NewPostgres(t.Context(), longterm.PostgresConfig{URL: databaseURL(), Schema: schema, Dimensions: dims, MaxConns: 2})
		}
	})
}

func TestEmbedded(t *testing.T) {
	t.Parallel()
	longtermtest.Run(t, func(t *testing.T) longtermtest.Opener {
		dir := filepath.Join(t.TempDir(), "memory")
		return func(dims int) (longterm.Store, error) {
			return longterm.NewEmbedded(longterm.EmbeddedConfig{Dir: dir, Dimensions: dims})
		}
	})
}

// TestPostgresMigrations checks the migration bookkeeping and the index.
func TestPostgresMigrations(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	open := func() *longterm.Postgres {
		p, err := longterm.NewPostgres(t.Context(), longterm.PostgresConfig{URL: databaseURL(), Schema: schema, Dimensions: 8, MaxConns: 1})
		if err != nil {
			t.Fatalf("NewPostgres: %v", err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	p := open()
	_ = open() // a second start applies nothing
	var versions int
	if err := p.Pool().QueryRow(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&versions); err != nil || versions != 2 {
		t.Fatalf("schema_migrations rows = %d, %v; want 2", versions, err)
	}
	var def string
	if err := p.Pool().QueryRow(t.Context(), "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'memories_embedding_hnsw'", schema).Scan(&def); err != nil {
		t.Fatalf("hnsw index: %v", err)
	}
	if want := "vector_cosine_ops"; !contains(def, "hnsw") || !contains(def, want) {
		t.Fatalf("index definition %q: want hnsw with %s", def, want)
	}
	if !p.IterativeScan() {
		t.Logf("pgvector %s has no iterative scans", p.Version())
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
