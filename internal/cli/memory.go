package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/pii"
	"github.com/relaystation/relay/memory/remote"
	"github.com/relaystation/relay/memory/session"
	"github.com/relaystation/relay/memory/summary"
	memsvc "github.com/relaystation/relay/services/memory"
)

func init() {
	registerService(&service{
		name:        "memory",
		summary:     "sessions, long-term memory and retrieval; `relay memory remember|recall|forget` for operators",
		configure:   configureMemory,
		subcommands: runMemoryCLI,
	})
}

// memorySettings are the memory worker's environment settings.
type memorySettings struct {
	redisURL, databaseURL             string
	embBase, embModel                 string
	embCfg                            embed.OpenAIConfig
	llm                               summary.LLMConfig
	piiNames                          []string
	dims, efSearch, turns, fold, conc int
	sessionTTL, episodeTTL, halfLife  time.Duration
}

func readMemorySettings(env *config.Env) *memorySettings {
	s := &memorySettings{
		redisURL:    env.URL("REDIS_URL", "redis", "rediss", "unix"),
		databaseURL: env.URL("DATABASE_URL", "postgres", "postgresql"),
		embBase:     env.URL("EMBEDDINGS_BASE_URL", "http", "https"),
		embModel:    env.String("EMBEDDINGS_MODEL", ""),
		piiNames:    env.List("RELAY_PII_NAMES"),
		dims:        env.Int("RELAY_MEMORY_DIMENSIONS", 384, 1, 16000),
		efSearch:    env.Int("RELAY_MEMORY_EF_SEARCH", 100, 10, 1000),
		turns:       env.Int("RELAY_MEMORY_SESSION_TURNS", 100, 1, 10000),
		fold:        env.Int("RELAY_MEMORY_FOLD_BYTES", 2048, 256, 1<<20),
		conc:        env.Int("RELAY_MEMORY_CONCURRENCY", 4, 1, 256),
		sessionTTL:  env.Duration("RELAY_MEMORY_SESSION_TTL", 24*time.Hour, time.Minute, 365*24*time.Hour),
		episodeTTL:  env.Duration("RELAY_MEMORY_EPISODE_TTL", 7*24*time.Hour, time.Minute, 365*24*time.Hour),
		halfLife:    env.Duration("RELAY_MEMORY_HALF_LIFE", 30*24*time.Hour, time.Hour, 10*365*24*time.Hour),
	}
	key := env.Secret("EMBEDDINGS_API_KEY")
	s.embCfg = embed.OpenAIConfig{BaseURL: s.embBase, Model: s.embModel, APIKey: key, Dimensions: s.dims}
	if (s.embBase == "") != (s.embModel == "") {
		env.Failf("EMBEDDINGS_MODEL", "set EMBEDDINGS_BASE_URL and EMBEDDINGS_MODEL together (or neither, for the local embedder)")
	}
	s.llm = summary.LLMConfig{
		BaseURL: env.URL("LLM_BASE_URL", "http", "https"),
		Model:   env.String("LLM_MODEL", ""),
		APIKey:  env.Secret("LLM_API_KEY"),
	}
	if s.llm.BaseURL != "" && s.llm.Model == "" {
		env.Failf("LLM_MODEL", "LLM_BASE_URL is set but LLM_MODEL is not")
	}
	return s
}

func configureMemory(env *config.Env) buildFunc {
	s := readMemorySettings(env)
	return func(ctx context.Context, d *deps) (*runner, error) {
		var closers []func()
		closeAll := func() {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
		var checks = map[string]httpserver.Check{}
		opts := session.Options{MaxTurns: s.turns, TTL: s.sessionTTL}
		var sessions session.Store
		if s.redisURL != "" {
			rs, err := session.NewRedis(ctx, session.RedisConfig{URL: s.redisURL, Options: opts})
			if err != nil {
				return nil, err
			}
			closers = append(closers, func() { _ = rs.Close() })
			checks["redis"] = rs.Ping
			sessions = rs
		} else {
			kv, err := session.NewKV(ctx, d.Bus.JetStream(), session.KVConfig{Bucket: d.Bus.Prefix() + "_sessions", Options: opts})
			if err != nil {
				return nil, err
			}
			sessions = kv
		}
		scoring := longterm.Scoring{HalfLife: s.halfLife}
		var lt longterm.Store
		if s.databaseURL != "" {
			pg, err := longterm.NewPostgres(ctx, longterm.PostgresConfig{URL: s.databaseURL, Dimensions: s.dims,
				EfSearch: s.efSearch, Scoring: scoring, Logger: d.Log})
			if err != nil {
				closeAll()
				return nil, err
			}
			closers = append(closers, func() { _ = pg.Close() })
			checks["postgres"] = pg.Ping
			lt = pg
		} else {
			em, err := longterm.NewEmbedded(longterm.EmbeddedConfig{Dir: filepath.Join(d.DataDir, "memory"), Dimensions: s.dims, Scoring: scoring})
			if err != nil {
				closeAll()
				return nil, err
			}
			lt = em
		}
		var emb embed.Embedder = embed.NewLocal(s.dims)
		if s.embBase != "" {
			o, err := embed.NewOpenAI(s.embCfg)
			if err != nil {
				closeAll()
				return nil, err
			}
			emb = o
		}
		var sum summary.Summariser = summary.Extractive{}
		if s.llm.BaseURL != "" {
			cfg := s.llm
			cfg.Fallback, cfg.Logger = summary.Extractive{}, d.Log
			l, err := summary.NewLLM(cfg)
			if err != nil {
				closeAll()
				return nil, err
			}
			sum = l
		}
		mem, err := memory.New(memory.Config{Sessions: sessions, LongTerm: lt, Embedder: emb, Scrubber: pii.New(s.piiNames),
			Summariser: sum, FoldAt: s.fold, EpisodeTTL: s.episodeTTL, Logger: d.Log.With("service", "memory")})
		if err != nil {
			closeAll()
			return nil, err
		}
		w, err := memsvc.New(memsvc.Config{Concurrency: s.conc, Logger: d.Log.With("service", "memory")}, d.Bus, mem)
		if err != nil {
			closeAll()
			return nil, err
		}
		d.Log.Info("memory configured", "sessions", map[bool]string{true: "redis", false: "jetstream-kv"}[s.redisURL != ""],
			"long_term", map[bool]string{true: "postgres", false: "embedded"}[s.databaseURL != ""],
			"embedder", emb.Name(), "dimensions", s.dims, "summariser", map[bool]string{true: "llm", false: "extractive"}[s.llm.BaseURL != ""])
		return &runner{
			routes: func(srv *httpserver.Server) {
				for name, c := range checks {
					srv.AddCheck(name, c)
				}
			},
			run:   w.Run,
			close: closeAll,
		}, nil
	}
}

const memoryUsage = `usage:
  relay memory                                   run the memory worker
  relay memory remember --thread T [--uri U] [--source S] "text"
  relay memory recall "query" [-k N] [--thread T] [--channel C] [--docs] [--json]
  relay memory forget --thread T`

// runMemoryCLI runs the operator commands against the running memory worker
// over the bus (request/reply), so they work with the embedded stores too.
func runMemoryCLI(ctx context.Context, a *app, args []string) error {
	readMemorySettings(a.env) // the worker's settings may be set; they are not unknown
	if err := a.checkEnv(); err != nil {
		return err
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("memory "+cmd, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	thread := fs.String("thread", "", "thread key, e.g. github:owner/repo#12")
	var run func(c *remote.Client, text string) error
	switch cmd {
	case "remember":
		uri := fs.String("uri", "", "URI of the original (makes the memory a document)")
		source := fs.String("source", "cli", "where the memory comes from")
		channel := fs.String("channel", "", "channel of the memory (default: from the thread key)")
		run = func(c *remote.Client, text string) error {
			if text == "" {
				return &exitError{code: 2, msg: "memory remember: the text is required\n" + memoryUsage}
			}
			ch := *channel
			if ch == "" && *thread != "" {
				ch = threadChannel(*thread)
			}
			m, err := c.Remember(ctx, memory.Note{Text: text, Thread: *thread, URI: *uri, Source: *source, Channel: ch})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "remembered %s (%s, thread %q)\n", m.ID, m.Kind, m.Thread)
			return nil
		}
	case "recall":
		k := fs.Int("k", 5, "number of memories to show")
		channel := fs.String("channel", "", "only memories of this channel")
		docs := fs.Bool("docs", false, "only documents (retrieve_docs)")
		asJSON := fs.Bool("json", false, "print JSON lines")
		run = func(c *remote.Client, text string) error {
			if text == "" {
				return &exitError{code: 2, msg: "memory recall: the query is required\n" + memoryUsage}
			}
			q := memory.Query{Text: text, K: *k, Thread: *thread, Channel: *channel}
			if *docs {
				q.Kind = longterm.KindDoc
			}
			refs, err := c.Retrieve(ctx, q)
			if err != nil {
				return err
			}
			return printRefs(a, refs, *asJSON)
		}
	case "forget":
		run = func(c *remote.Client, text string) error {
			if *thread == "" || text != "" {
				return &exitError{code: 2, msg: "memory forget: --thread T is required (and nothing else)\n" + memoryUsage}
			}
			f, err := c.Forget(ctx, *thread)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "forgot thread %s: its session, episodes and %d long-term memories\n", f.Thread, f.Memories)
			return nil
		}
	default:
		return &exitError{code: 2, msg: fmt.Sprintf("memory: unknown subcommand %q\n%s", cmd, memoryUsage)}
	}
	text, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	b, err := a.clientBus(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return run(remote.NewClient(b.Conn(), b.Prefix(), 30*time.Second), text)
}

// parseInterspersed parses flags before and after the positional words, which
// it joins with spaces.
func parseInterspersed(fs *flag.FlagSet, args []string) (string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		words = append(words, rest[0])
		args = rest[1:]
	}
	return strings.TrimSpace(strings.Join(words, " ")), nil
}

func threadChannel(thread string) string {
	ch, _, _ := strings.Cut(thread, ":")
	switch ch {
	case "slack", "github", "sentry", "openproject", "internal":
		return ch
	}
	return ""
}

func printRefs(a *app, refs []memory.Ref, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		for _, r := range refs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCORE\tAGE\tSOURCE\tTHREAD\tID\tTEXT")
	for _, r := range refs {
		text := clip.Line(r.Text, 80)
		if r.URI != "" {
			text += " <" + r.URI + ">"
		}
		fmt.Fprintf(tw, "%.3f\t%s\t%s\t%s\t%s\t%s\n", r.Score, age(time.Since(r.Created)), dash(r.Source), dash(r.Thread), r.ID, text)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%d memories\n", len(refs))
	return nil
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
