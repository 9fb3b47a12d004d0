package memory

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/pii"
	"github.com/relaystation/relay/memory/session"
	"github.com/relaystation/relay/memory/summary"
)

// Settings are the memory worker's settings from the environment: which
// stores, embedder and summariser it opens, and their limits.
type Settings struct {
	RedisURL, DatabaseURL string
	Embeddings            embed.OpenAIConfig
	LLM                   summary.LLMConfig
	PIINames              []string
	Dimensions, EfSearch  int
	SessionTurns, FoldAt  int
	Concurrency           int
	Linger                time.Duration
	SessionTTL            time.Duration
	EpisodeTTL, HalfLife  time.Duration
}

// ReadSettings reads REDIS_URL, DATABASE_URL, EMBEDDINGS_BASE_URL,
// EMBEDDINGS_MODEL, EMBEDDINGS_API_KEY, LLM_BASE_URL, LLM_MODEL, LLM_API_KEY,
// RELAY_PII_NAMES and the RELAY_MEMORY_* settings. Problems are recorded in env.
func ReadSettings(env *config.Env) Settings {
	s := Settings{
		RedisURL:     env.URL("REDIS_URL", "redis", "rediss", "unix"),
		DatabaseURL:  env.URL("DATABASE_URL", "postgres", "postgresql"),
		PIINames:     env.List("RELAY_PII_NAMES"),
		Dimensions:   env.Int("RELAY_MEMORY_DIMENSIONS", 384, 1, 16000),
		EfSearch:     env.Int("RELAY_MEMORY_EF_SEARCH", 100, 10, 1000),
		SessionTurns: env.Int("RELAY_MEMORY_SESSION_TURNS", 100, 1, 10000),
		FoldAt:       env.Int("RELAY_MEMORY_FOLD_BYTES", 2048, 256, 1<<20),
		Concurrency:  env.Int("RELAY_MEMORY_CONCURRENCY", 16, 1, 256),
		Linger:       env.Duration("RELAY_MEMORY_LINGER", DefaultLinger, 0, time.Second),
		SessionTTL:   env.Duration("RELAY_MEMORY_SESSION_TTL", 24*time.Hour, time.Minute, 365*24*time.Hour),
		EpisodeTTL:   env.Duration("RELAY_MEMORY_EPISODE_TTL", 7*24*time.Hour, time.Minute, 365*24*time.Hour),
		HalfLife:     env.Duration("RELAY_MEMORY_HALF_LIFE", 30*24*time.Hour, time.Hour, 10*365*24*time.Hour),
	}
	s.Embeddings = embed.OpenAIConfig{
		BaseURL:    env.URL("EMBEDDINGS_BASE_URL", "http", "https"),
		Model:      env.String("EMBEDDINGS_MODEL", ""),
		APIKey:     env.Secret("EMBEDDINGS_API_KEY"),
		Dimensions: s.Dimensions,
	}
	if (s.Embeddings.BaseURL == "") != (s.Embeddings.Model == "") {
		env.Failf("EMBEDDINGS_MODEL", "set EMBEDDINGS_BASE_URL and EMBEDDINGS_MODEL together (or neither, for the local embedder)")
	}
	s.LLM = summary.LLMConfig{
		BaseURL: env.URL("LLM_BASE_URL", "http", "https"),
		Model:   env.String("LLM_MODEL", ""),
		APIKey:  env.Secret("LLM_API_KEY"),
	}
	if s.LLM.BaseURL != "" && s.LLM.Model == "" {
		env.Failf("LLM_MODEL", "LLM_BASE_URL is set but LLM_MODEL is not")
	}
	return s
}

// Opened is the memory the settings describe, open on its stores.
type Opened struct {
	Memory *memory.Memory
	// Checks are readiness checks of the external stores (redis, postgres).
	Checks map[string]func(context.Context) error
	// Close closes the stores; call it after the worker stopped.
	Close func()
}

// Open opens the stores: Redis sessions (else JetStream KV on b), Postgres
// long-term memory (else the embedded store under dataDir), the OpenAI
// embedder (else the local one) and the LLM summariser (else extractive).
func (s Settings) Open(ctx context.Context, b *bus.Bus, dataDir string, log *slog.Logger) (*Opened, error) {
	o := &Opened{Checks: map[string]func(context.Context) error{}}
	var closers []func()
	o.Close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (*Opened, error) {
		o.Close()
		return nil, err
	}
	sessions, err := s.openSessions(ctx, b)
	if err != nil {
		return nil, err
	}
	if rs, ok := sessions.(*session.Redis); ok {
		closers = append(closers, func() { _ = rs.Close() })
		o.Checks["redis"] = rs.Ping
	}
	scoring := longterm.Scoring{HalfLife: s.HalfLife}
	var lt longterm.Store
	if s.DatabaseURL != "" {
		pg, err := longterm.NewPostgres(ctx, longterm.PostgresConfig{URL: s.DatabaseURL, Dimensions: s.Dimensions,
			EfSearch: s.EfSearch, Scoring: scoring, Logger: log})
		if err != nil {
			return fail(err)
		}
		closers = append(closers, func() { _ = pg.Close() })
		o.Checks["postgres"] = pg.Ping
		lt = pg
	} else {
		em, err := longterm.NewEmbedded(longterm.EmbeddedConfig{Dir: filepath.Join(dataDir, "memory"), Dimensions: s.Dimensions, Scoring: scoring})
		if err != nil {
			return fail(err)
		}
		lt = em
	}
	emb, sum, err := s.models(log)
	if err != nil {
		return fail(err)
	}
	o.Memory, err = memory.New(memory.Config{Sessions: sessions, LongTerm: lt, Embedder: emb, Scrubber: pii.New(s.PIINames),
		Summariser: sum, FoldAt: s.FoldAt, EpisodeTTL: s.EpisodeTTL, Logger: log})
	if err != nil {
		return fail(err)
	}
	log.Info("memory configured", "sessions", map[bool]string{true: "redis", false: "jetstream-kv"}[s.RedisURL != ""],
		"long_term", map[bool]string{true: "postgres", false: "embedded"}[s.DatabaseURL != ""],
		"embedder", emb.Name(), "dimensions", s.Dimensions, "summariser", map[bool]string{true: "llm", false: "extractive"}[s.LLM.BaseURL != ""])
	return o, nil
}

// defaultMaxEpisodeTTL is the stores' default cap of an episode's lifetime
// (session.Options.MaxEpisodeTTL).
const defaultMaxEpisodeTTL = 30 * 24 * time.Hour

func (s Settings) openSessions(ctx context.Context, b *bus.Bus) (session.Store, error) {
	// The stores cap an episode's lifetime (30 days by default); a longer
	// RELAY_MEMORY_EPISODE_TTL raises the cap, or it would be cut silently.
	opts := session.Options{MaxTurns: s.SessionTurns, TTL: s.SessionTTL, MaxEpisodeTTL: max(s.EpisodeTTL, defaultMaxEpisodeTTL)}
	if s.RedisURL != "" {
		return session.NewRedis(ctx, session.RedisConfig{URL: s.RedisURL, Options: opts})
	}
	return session.NewKV(ctx, b.JetStream(), session.KVConfig{Bucket: b.Prefix() + "_sessions", Options: opts})
}

// models returns the embedder and the summariser.
func (s Settings) models(log *slog.Logger) (embed.Embedder, summary.Summariser, error) {
	var emb embed.Embedder = embed.NewLocal(s.Dimensions)
	if s.Embeddings.BaseURL != "" {
		o, err := embed.NewOpenAI(s.Embeddings)
		if err != nil {
			return nil, nil, err
		}
		emb = o
	}
	var sum summary.Summariser = summary.Extractive{}
	if s.LLM.BaseURL != "" {
		cfg := s.LLM
		cfg.Fallback, cfg.Logger = summary.Extractive{}, log
		l, err := summary.NewLLM(cfg)
		if err != nil {
			return nil, nil, err
		}
		sum = l
	}
	return emb, sum, nil
}
