package memory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/memory/longterm"
	"github.com/relaystation/relay/memory/memtest"
	"github.com/relaystation/relay/memory/remote"
	"github.com/relaystation/relay/memory/session"
	svc "github.com/relaystation/relay/services/memory"
)

const dims = 384

type stores struct {
	sessions session.Store
	longterm longterm.Store
}

// start runs the worker on b with the given stores until the test ends.
func start(t *testing.T, b *bus.Bus, st stores) *memory.Memory {
	t.Helper()
	m, s := newWorker(t, b, memory.Config{Sessions: st.sessions, LongTerm: st.longterm},
		svc.Config{NakDelays: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond},
			MaxDeliver: 100, HandlerTimeout: 5 * time.Second})
	testenv.Go(t, "Run", s.Run)
	return m
}

// newWorker builds the memory of mc, with the local embedder of dims, and
// the worker of cfg on b over it, not started.
func newWorker(tb testing.TB, b *bus.Bus, mc memory.Config, cfg svc.Config) (*memory.Memory, *svc.Service) {
	tb.Helper()
	mc.Embedder = embed.NewLocal(dims)
	m, err := memory.New(mc)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := svc.New(cfg, b, m)
	if err != nil {
		tb.Fatal(err)
	}
	return m, s
}

func embeddedStores(t *testing.T, b *bus.Bus) stores {
	t.Helper()
	ss, lt := memtest.Stores(t, b, session.KVConfig{}, dims)
	return stores{ss, lt}
}

func publish(t *testing.T, b *bus.Bus, subject string, e *envelope.Envelope) {
	t.Helper()
	if _, err := b.Publish(t.Context(), subject, e); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

// newEnv is memtest.Envelope under this package's name for it.
var newEnv = memtest.Envelope

// TestWorkerEmbedded runs the worker on the embedded defaults and talks to it
// over the bus like the agent in another process would.
func TestWorkerEmbedded(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	start(t, b, embeddedStores(t, b))
	client := remote.NewClient(bustest.Connect(t, b).Conn(), b.Prefix(), 5*time.Second)
	ctx := t.Context()
	th := envelope.GitHubThread("acme", "api", 7)

	in := newEnv(th, envelope.RoleUser, "Please summarise issue 7.")
	publish(t, b, "in.github.issues", in)
	publish(t, b, "in.github.issues", in) // same id again: JetStream de-duplicates
	call := newEnv(th, envelope.RoleAssistant, "")
	call.ToolCall = &envelope.ToolCall{Name: "github.get_issue", Args: map[string]any{"number": 7.0}}
	publish(t, b, envelope.SubjectToolCall, call)
	res := newEnv(th, envelope.RoleTool, "")
	res.ToolCall = &envelope.ToolCall{Name: "github.get_issue", Result: map[string]any{"title": "Crash on start"}}
	publish(t, b, envelope.SubjectToolResult, res)
	answer := newEnv(th, envelope.RoleAssistant, "Issue 7 is a crash on start.")
	answer.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"text": "The api crashes on start when CONFIG_PATH is unset."}}
	publish(t, b, "agent.answer", answer)
	note := newEnv(th, envelope.RoleSystem, "")
	note.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryEpisodic, Data: map[string]any{"reporter": "ops team"}}
	publish(t, b, "memory.update", note)

	var sc memory.SessionContext
	testenv.Poll(t, 15*time.Second, func() (bool, string) {
		var err error
		sc, err = client.Context(ctx, th, 0)
		if err != nil {
			return false, err.Error()
		}
		return len(sc.Turns) == 4 && len(sc.Episodes) == 1, fmt.Sprintf("got %d turns and %d episodes, want 4 and 1", len(sc.Turns), len(sc.Episodes))
	})
	roles := map[string]bool{}
	for _, tu := range sc.Turns {
		roles[tu.Role] = true
	}
	if !roles["user"] || !roles["assistant"] || !roles["tool"] || sc.Tokens == 0 {
		t.Fatalf("turns %+v: want user, assistant and tool turns and a token estimate", sc.Turns)
	}
	// The long-term memory is written after the answer's turn (Memory.ObserveAll
	// appends the turns first), so the session may be complete before it.
	var refs []memory.Ref
	testenv.Poll(t, 15*time.Second, func() (bool, string) {
		var err error
		refs, err = client.Retrieve(ctx, memory.Query{Text: "why does the api crash on start", K: 3, Thread: th})
		if err != nil {
			return false, err.Error()
		}
		return len(refs) > 0, "no long-term memory retrieved yet"
	})
	if len(refs) != 1 || refs[0].ID != answer.ID || refs[0].Score <= 0 {
		t.Fatalf("got refs %+v, want the long-term memory", refs)
	}
	if _, err := client.Retrieve(ctx, memory.Query{}); err == nil {
		t.Fatal("empty query: got nil error")
	} else if re := (*remote.Error)(nil); !errors.As(err, &re) || re.Code != remote.CodeBadRequest {
		t.Fatalf("empty query: got %v, want a bad_request error", err)
	}
	m, err := client.Remember(ctx, memory.Note{Text: "Runbook for crashes", URI: "https://wiki/crash", Thread: th, Source: "cli"})
	if err != nil || m.Kind != longterm.KindDoc {
		t.Fatalf("Remember = %+v, %v; want a doc", m, err)
	}
	docs, err := client.RetrieveDocs(ctx, "crash runbook", 2)
	if err != nil || len(docs) != 1 || docs[0].URI != "https://wiki/crash" {
		t.Fatalf("RetrieveDocs = %+v, %v; want the runbook", docs, err)
	}
	f, err := client.Forget(ctx, th)
	if err != nil || f.Memories != 2 {
		t.Fatalf("Forget = %+v, %v; want 2 memories removed", f, err)
	}
}

// TestWorkerBadUpdate dead-letters a memory_update of the wrong shape with
// its reason, and keeps working.
func TestWorkerBadUpdate(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	st := embeddedStores(t, b)
	start(t, b, st)
	bad := newEnv("github:o/r#1", envelope.RoleAssistant, "remember this")
	bad.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"body": "no text field"}}
	publish(t, b, "agent.answer", bad)
	testenv.Poll(t, 15*time.Second, func() (bool, string) {
		dls, err := b.DeadLetters(t.Context(), 0)
		if err != nil {
			return false, err.Error()
		}
		for _, d := range dls {
			if d.Consumer == "memory-agent" && strings.Contains(d.Reason, "/memory_update/data/text") && strings.Contains(string(d.Envelope), bad.ID) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d dead letters, none for %s with the reason", len(dls), bad.ID)
	})
	// The bad update stored nothing, not even its turn.
	if s, _ := st.sessions.Load(t.Context(), "github:o/r#1"); len(s.Turns) != 0 {
		t.Fatalf("got %d turns, want 0", len(s.Turns))
	}
}

func redisTarget() string {
	u := testenv.Getenv("REDIS_URL", "redis://127.0.0.1:6379")
	u = strings.TrimPrefix(u, "redis://")
	if i := strings.IndexAny(u, "/"); i >= 0 {
		u = u[:i]
	}
	return u
}

// TestWorkerRedisOutage takes Redis away while an envelope arrives: the
// worker naks, and stores the turn once Redis is back.
func TestWorkerRedisOutage(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	proxy := memtest.NewProxy(t, redisTarget())
	prefix := "test:" + uuid.NewString()[:8] + ":"
	rs, err := session.NewRedis(t.Context(), session.RedisConfig{URL: "redis://" + proxy.Addr(), KeyPrefix: prefix})
	if err != nil {
		testenv.Missing(t, "redis at %s: %v", redisTarget(), err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	lt, err := longterm.NewEmbedded(longterm.EmbeddedConfig{Dir: t.TempDir(), Dimensions: dims})
	if err != nil {
		t.Fatal(err)
	}
	start(t, b, stores{rs, lt})
	th := "github:o/r#" + uuid.NewString()[:4]
	publish(t, b, "in.github.issues", newEnv(th, envelope.RoleUser, "before the outage"))
	waitTurns(t, rs, th, 1)

	proxy.Down()
	publish(t, b, "in.github.issues", newEnv(th, envelope.RoleUser, "during the outage"))
	waitRedelivered(t, b, "memory-in")
	proxy.Up(t)
	waitTurns(t, rs, th, 2)
	if dls, _ := b.DeadLetters(t.Context(), 0); len(dls) != 0 {
		t.Fatalf("got %d dead letters, want none (an outage is transient)", len(dls))
	}
}

// TestWorkerPostgresOutage takes Postgres away while a long-term update
// arrives: the worker naks, and stores the memory once Postgres is back.
func TestWorkerPostgresOutage(t *testing.T) {
	t.Parallel()
	dbURL := testenv.Getenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
	admin, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		testenv.Missing(t, "postgres at %s: %v", dbURL, err)
	}
	schema := "t_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := admin.Exec(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(context.Background())
	})
	cc := admin.Config()
	proxy := memtest.NewProxy(t, fmt.Sprintf("%s:%d", cc.Host, cc.Port))
	proxied := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", cc.User, proxy.Addr(), cc.Database)
	pg, err := longterm.NewPostgres(t.Context(), longterm.PostgresConfig{URL: proxied, Schema: schema, Dimensions: dims, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	b := bustest.Embedded(t)
	ss, err := session.NewKV(t.Context(), b.JetStream(), session.KVConfig{})
	if err != nil {
		t.Fatal(err)
	}
	start(t, b, stores{ss, pg})

	proxy.Down()
	e := newEnv("github:o/r#9", envelope.RoleAssistant, "")
	e.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"text": "kept across a database outage"}}
	publish(t, b, "agent.answer", e)
	waitRedelivered(t, b, "memory-agent")
	proxy.Up(t)
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		n, err := pg.Count(t.Context())
		if err != nil {
			return false, err.Error()
		}
		return n == 1, fmt.Sprintf("%d memories stored, want 1", n)
	})
	if dls, _ := b.DeadLetters(t.Context(), 0); len(dls) != 0 {
		t.Fatalf("got %d dead letters, want none", len(dls))
	}
}

func waitTurns(t *testing.T, s session.Store, th string, n int) {
	t.Helper()
	testenv.Poll(t, 30*time.Second, func() (bool, string) {
		got, err := s.Load(t.Context(), th)
		if err != nil {
			return false, err.Error()
		}
		return len(got.Turns) == n, fmt.Sprintf("%d turns, want %d", len(got.Turns), n)
	})
}

// waitRedelivered waits until the consumer name has redelivered a message.
func waitRedelivered(t *testing.T, b *bus.Bus, name string) {
	t.Helper()
	testenv.Poll(t, 15*time.Second, func() (bool, string) {
		info, err := consumerInfo(t, b, name)
		if err != nil {
			return false, err.Error()
		}
		return info.NumRedelivered > 0, "no redelivery yet"
	})
}

// consumerInfo reads the worker's consumer name, on the inbound stream or
// the agent's.
func consumerInfo(t *testing.T, b *bus.Bus, name string) (*jetstream.ConsumerInfo, error) {
	info, err := bustest.ConsumerInfo(t.Context(), b, "in.x", name)
	if err != nil && name != "memory-in" {
		info, err = bustest.ConsumerInfo(t.Context(), b, "agent.x", name)
	}
	return info, err
}
