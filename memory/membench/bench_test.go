package membench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/session"
)

const dims = 384

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000) }

// BenchmarkMemory runs the whole report once; use -benchtime 1x.
func BenchmarkMemory(b *testing.B) {
	for range b.N {
		benchSessions(b)
		benchLongTerm(b)
	}
}

func benchSessions(b *testing.B) {
	ctx := context.Background()
	url := testenv.Getenv("REDIS_URL", "redis://127.0.0.1:6379")
	prefix := "bench:" + uuid.NewString()[:8] + ":"
	s, err := session.NewRedis(ctx, session.RedisConfig{URL: url, KeyPrefix: prefix})
	if err != nil {
		testenv.Missing(b, "redis: %v", err)
	}
	defer s.Close()
	rdb := s.Client()
	defer func() {
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}()
	const n = 3000
	content := strings.Repeat("a typical chat turn of about a hundred bytes. ", 2)
	var app, read, rawPush, rawRange []time.Duration
	for i := range n {
		th := fmt.Sprintf("github:bench/repo#%d", i%50) // 50 threads, 60 turns each (below the 100 cap)
		t0 := time.Now()
		if _, err := s.Append(ctx, th, session.Turn{ID: uuid.NewString(), Role: "user", Content: content, Time: time.Now()}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := s.Load(ctx, th); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		app, read = append(app, t1.Sub(t0)), append(read, t2.Sub(t1))

		key := prefix + "raw:" + th
		t0 = time.Now()
		if err := rdb.LPush(ctx, key, `{"id":"`+uuid.NewString()+`","role":"user","content":"`+content+`"}`).Err(); err != nil {
			b.Fatal(err)
		}
		t1 = time.Now()
		if err := rdb.LRange(ctx, key, 0, -1).Err(); err != nil {
			b.Fatal(err)
		}
		t2 = time.Now()
		rawPush, rawRange = append(rawPush, t1.Sub(t0)), append(rawRange, t2.Sub(t1))
	}
	b.Logf("sessions (Redis, %d ops, 50 threads of 60 turns): store Append p50 %s p99 %s | raw LPUSH p50 %s p99 %s",
		n, ms(pct(app, .5)), ms(pct(app, .99)), ms(pct(rawPush, .5)), ms(pct(rawPush, .99)))
	b.Logf("sessions: store Load p50 %s p99 %s | raw LRANGE p50 %s p99 %s",
		ms(pct(read, .5)), ms(pct(read, .99)), ms(pct(rawRange, .5)), ms(pct(rawRange, .99)))
	b.ReportMetric(float64(pct(app, .99).Microseconds()), "append-p99-µs")
	b.ReportMetric(float64(pct(read, .99).Microseconds()), "load-p99-µs")
}

// clustered returns n unit vectors around 100 random centres (noise scaled so
// neighbours within a cluster are close but distinct), like embeddings of
// texts about a few topics.
type gen struct {
	r       *rand.Rand
	centres [][]float32
}

func newGen(seed uint64) *gen {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed+1))}
	for range 100 {
		g.centres = append(g.centres, g.noise(1))
	}
	return g
}

func (g *gen) noise(scale float64) []float32 {
	v := make([]float32, dims)
	for i := range v {
		v[i] = float32(g.r.NormFloat64() * scale)
	}
	return v
}

func (g *gen) next() []float32 {
	c := g.centres[g.r.IntN(len(g.centres))]
	n := g.noise(0.6)
	var norm float64
	for i := range n {
		n[i] += c[i]
		norm += float64(n[i]) * float64(n[i])
	}
	inv := float32(1 / math.Sqrt(norm))
	for i := range n {
		n[i] *= inv
	}
	return n
}

// longTermBench is one run of the long-term store benchmark: a fresh schema
// with rows clustered vectors.
type longTermBench struct {
	b      *testing.B
	url    string
	schema string
	rows   int
	g      *gen
}

func benchLongTerm(b *testing.B) {
	ctx := context.Background()
	lb := &longTermBench{b: b, url: testenv.Getenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"), rows: 100000, g: newGen(42)}
	if v, err := strconv.Atoi(os.Getenv("MEMBENCH_ROWS")); err == nil && v > 0 {
		lb.rows = v
	}
	admin, err := pgx.Connect(ctx, lb.url)
	if err != nil {
		testenv.Missing(b, "postgres: %v", err)
	}
	defer admin.Close(ctx)
	lb.schema = "bench_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+lb.schema); err != nil {
		b.Fatal(err)
	}
	defer admin.Exec(context.Background(), "DROP SCHEMA "+lb.schema+" CASCADE") //nolint:errcheck

	p := lb.open(ctx, 100)
	defer p.Close()
	b.Logf("pgvector %s, iterative index scans: %v", p.Version(), p.IterativeScan())
	lb.insert(ctx, p)

	// Queries from the same distribution, not in the table.
	const nq = 200
	qs := make([][]float32, nq)
	for i := range qs {
		qs[i] = lb.g.next()
	}
	truth := lb.groundTruth(ctx, p, qs)
	for _, ef := range []int{40, 100, 200} {
		lb.search(ctx, ef, qs, truth)
	}
}

func (lb *longTermBench) open(ctx context.Context, ef int) *longterm.Postgres {
	p, err := longterm.NewPostgres(ctx, longterm.PostgresConfig{URL: lb.url, Schema: lb.schema, Dimensions: dims, EfSearch: ef, MaxConns: 2})
	if err != nil {
		lb.b.Fatal(err)
	}
	return p
}

// insert fills the table: single upserts into the indexed table (the
// worker's path), then the rest in bulk: drop the index, COPY, build the
// index once.
func (lb *longTermBench) insert(ctx context.Context, p *longterm.Postgres) {
	b := lb.b
	created := time.Now().Add(-time.Hour)
	mk := func(i int) longterm.Record {
		return longterm.Record{Memory: longterm.Memory{ID: fmt.Sprintf("m%07d", i), Text: "memory " + strconv.Itoa(i),
			Thread: fmt.Sprintf("github:bench/repo#%d", i%100), Channel: "github", Source: "bench", Created: created}, Vector: lb.g.next()}
	}
	const single = 2000
	t0 := time.Now()
	for i := range single {
		if err := p.Upsert(ctx, mk(i)); err != nil {
			b.Fatal(err)
		}
	}
	upsertRate := float64(single) / time.Since(t0).Seconds()

	if err := p.DropIndex(ctx); err != nil {
		b.Fatal(err)
	}
	t0 = time.Now()
	const batch = 10000
	for start := single; start < lb.rows; start += batch {
		recs := make([]longterm.Record, 0, batch)
		for i := start; i < min(start+batch, lb.rows); i++ {
			recs = append(recs, mk(i))
		}
		if _, err := p.CopyFrom(ctx, recs); err != nil {
			b.Fatal(err)
		}
	}
	copyDur := time.Since(t0)
	copyRate := float64(lb.rows-single) / copyDur.Seconds()
	t0 = time.Now()
	lb.buildIndex(ctx, p)
	indexDur := time.Since(t0)
	b.Logf("long-term insert: %.0f upserts/s (one row per statement, HNSW index present); COPY %.0f rows/s (%d rows in %s); HNSW build %s",
		upsertRate, copyRate, lb.rows-single, copyDur.Round(time.Millisecond), indexDur.Round(time.Millisecond))
	b.ReportMetric(upsertRate, "upserts/s")
}

// buildIndex builds the HNSW index with enough maintenance memory to do it
// in one pass.
func (lb *longTermBench) buildIndex(ctx context.Context, p *longterm.Postgres) {
	conn, err := p.Pool().Acquire(ctx)
	if err != nil {
		lb.b.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{
		"SET maintenance_work_mem = '1GB'; SET max_parallel_maintenance_workers = 1",
		"CREATE INDEX memories_embedding_hnsw ON memories USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)",
		"RESET maintenance_work_mem; RESET max_parallel_maintenance_workers; ANALYZE memories",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			lb.b.Fatal(err)
		}
	}
}

// groundTruth returns the exact ten nearest ids of every query.
func (lb *longTermBench) groundTruth(ctx context.Context, p *longterm.Postgres, qs [][]float32) [][]string {
	truth := make([][]string, len(qs))
	var exact []time.Duration
	for i, q := range qs {
		t0 := time.Now()
		hits, err := p.ExactSearch(ctx, longterm.Query{Vector: q, K: 10})
		if err != nil {
			lb.b.Fatal(err)
		}
		exact = append(exact, time.Since(t0))
		for _, h := range hits {
			truth[i] = append(truth[i], h.ID)
		}
	}
	lb.b.Logf("exact scan (ground truth) at %d rows: p50 %s p99 %s", lb.rows, ms(pct(exact, .5)), ms(pct(exact, .99)))
	return truth
}

// search measures recall and latency of the index at ef_search ef, with and
// without a thread filter.
func (lb *longTermBench) search(ctx context.Context, ef int, qs [][]float32, truth [][]string) {
	b := lb.b
	s := lb.open(ctx, ef)
	defer s.Close()
	// Warm the index pages and the connections.
	for _, q := range qs[:20] {
		if _, err := s.Search(ctx, longterm.Query{Vector: q, K: 10}); err != nil {
			b.Fatal(err)
		}
	}
	var lat, flat []time.Duration
	found := 0
	for i, q := range qs {
		t0 := time.Now()
		hits, err := s.Search(ctx, longterm.Query{Vector: q, K: 10})
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		for _, h := range hits {
			if slices.Contains(truth[i], h.ID) {
				found++
			}
		}
		t0 = time.Now()
		fh, err := s.Search(ctx, longterm.Query{Vector: q, K: 10, Thread: fmt.Sprintf("github:bench/repo#%d", i%100)})
		if err != nil {
			b.Fatal(err)
		}
		flat = append(flat, time.Since(t0))
		if len(fh) != 10 {
			b.Errorf("filtered search returned %d hits, want 10", len(fh))
		}
	}
	recall := float64(found) / float64(len(qs)*10)
	b.Logf("retrieval ef_search=%d at %d rows: recall@10 %.4f, p50 %s p99 %s; filtered by thread (1%% of rows): p50 %s p99 %s",
		ef, lb.rows, recall, ms(pct(lat, .5)), ms(pct(lat, .99)), ms(pct(flat, .5)), ms(pct(flat, .99)))
	if ef == 100 {
		b.ReportMetric(recall, "recall@10")
		b.ReportMetric(float64(pct(lat, .99).Microseconds())/1000, "p99-ms")
	}
}
