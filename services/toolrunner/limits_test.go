package toolrunner

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

// limitRunner is one runner process on b: its own bus connection, its own
// KVLimits, the in-process svc MCP server at url.
func limitRunner(t *testing.T, b *bus.Bus, url, policy string, now func() time.Time) *tools.Runner {
	t.Helper()
	lim, err := OpenLimits(t.Context(), bustest.Connect(t, b), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	pol := toolstest.Policy(t, "roles:\n  - role: agent\n    capabilities: ['svc.*']\n"+policy)
	return svcRunner(t, url, pol, lim, now)
}

// svcRunner starts a runner on the svc server at url and waits until it is ready.
func svcRunner(tb testing.TB, url string, pol *mcpconfig.Policy, lim tools.LimitStore, now func() time.Time) *tools.Runner {
	tb.Helper()
	return toolstest.StartReady(tb, tools.Config{Servers: []mcpconfig.Server{{Name: "svc", Type: mcpconfig.HTTP, URL: url, ProtocolVersion: mcpconfig.DefaultProtocolVersion}},
		Policy: pol, Limits: lim, Now: now, HealthInterval: time.Minute})
}

func echo(t *testing.T, r *tools.Runner, thread string) *tools.Result {
	t.Helper()
	return r.Call(t.Context(), tools.Request{Tool: "svc.echo", Args: map[string]any{"message": "x"}, Thread: thread, Caller: tools.Caller{Role: "agent"}})
}

// TestLimitsAcrossRunnersAndRestart: the daily quota and the session limit
// are counted once for two runners on one bus, and a runner started after
// both closed (a restart) sees the same counts; the next UTC day starts a
// new quota.
func TestLimitsAcrossRunnersAndRestart(t *testing.T) {
	t.Parallel()
	url, _ := mcpServer(t)
	b := bustest.Embedded(t)
	today := func() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }
	tomorrow := func() time.Time { return today().Add(24 * time.Hour) }
	const pol = "budgets:\n  svc.echo: {daily_quota: 3}\nlimits: {perSession: 2}\n"
	a := limitRunner(t, b, url, pol, today)
	bb := limitRunner(t, b, url, pol, today)
	steps := []struct {
		name   string
		r      *tools.Runner
		thread string
		want   tools.Status
		is     error
	}{
		{"a, thread 1", a, "t1", tools.StatusSuccess, nil},
		{"b, thread 1", bb, "t1", tools.StatusSuccess, nil},
		{"a, thread 1 over its session", a, "t1", tools.StatusLimitExceeded, tools.ErrLimitExceeded},
		{"b, thread 2", bb, "t2", tools.StatusSuccess, nil},
		{"a, thread 3 over the day's quota", a, "t3", tools.StatusRateLimited, tools.ErrQuotaExhausted},
	}
	for _, s := range steps {
		if res := echo(t, s.r, s.thread); res.Status != s.want || s.is != nil && !errors.Is(res.Err, s.is) {
			t.Fatalf("%s: got %s (%v), want %s", s.name, res.Status, res.Err, s.want)
		}
	}
	_ = a.Close()
	_ = bb.Close()
	restarted := limitRunner(t, b, url, pol, today)
	if res := echo(t, restarted, "t4"); !errors.Is(res.Err, tools.ErrQuotaExhausted) {
		t.Errorf("after a restart: got %s (%v), want the quota still used up", res.Status, res.Err)
	}
	if res := echo(t, restarted, "t2"); res.Status != tools.StatusRateLimited {
		t.Errorf("after a restart, thread 2: got %s (%v), want rate_limited", res.Status, res.Err)
	}
	next := limitRunner(t, b, url, pol, tomorrow)
	if res := echo(t, next, "t4"); res.Err != nil {
		t.Errorf("the next day: got %v, want a fresh quota", res.Err)
	}
	if res := echo(t, next, "t1"); !errors.Is(res.Err, tools.ErrLimitExceeded) {
		t.Errorf("the next day, thread 1: got %s (%v), want its session still full", res.Status, res.Err)
	}
}

// TestDeadRunnerSlotsExpire: a process that dies holding every global slot
// (its connection gone, no lease renewals) blocks the others only until its
// leases expire; `relay mcp active` lists its execution until then.
func TestDeadRunnerSlotsExpire(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	const ttl = 2 * time.Second
	dying := bustest.Connect(t, b)
	dead, err := OpenLimits(t.Context(), dying, ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	live, err := OpenLimits(t.Context(), bustest.Connect(t, b), ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Acquire(t.Context(), tools.Execution{ID: "held", Server: "svc", Tool: "slow", Started: time.Now()}, 1); err != nil {
		t.Fatal(err)
	}
	// The lease is renewed while its holder lives: after several TTLs it
	// still holds the only slot.
	ctx, cancel := context.WithTimeout(t.Context(), 2*ttl)
	_, err = live.Acquire(ctx, tools.Execution{ID: "blocked"}, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slot of a live holder: got %v, want to wait", err)
	}
	if es, err := live.Active(t.Context()); err != nil || len(es) != 1 || es[0].ID != "held" {
		t.Fatalf("active: got %+v, %v; want the held execution", es, err)
	}
	dying.Close() // the process dies: no renewal, no release
	release, err := live.Acquire(t.Context(), tools.Execution{ID: "next", Started: time.Now()}, 1)
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	es, err := live.Active(t.Context())
	if err != nil || len(es) != 1 || es[0].ID != "next" {
		t.Errorf("active: got %+v, %v; want only the new execution", es, err)
	}
	release()
	testenv.WaitFor(t, 5*time.Second, "no active execution after release", func() bool {
		es, err := live.Active(t.Context())
		return err == nil && len(es) == 0
	})
}

// TestSharedCountIsExact: callers racing in two processes on one quota get
// exactly its limit, and a refusal takes back the other counts of the call.
func TestSharedCountIsExact(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	stores := make([]*KVLimits, 2)
	for i := range stores {
		var err error
		if stores[i], err = OpenLimits(t.Context(), bustest.Connect(t, b), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	full := errors.New("quota full")
	const limit, callers = 7, 20
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range callers {
		wg.Go(func() {
			_, err := stores[i%2].Count(t.Context(), []tools.Counter{
				{Key: "session.t" + strconv.Itoa(i), Limit: 1, Full: errors.New("session full")},
				{Key: "quota.2026-11-23.svc", Limit: limit, Full: full},
			})
			switch {
			case err == nil:
				ok.Add(1)
			case !errors.Is(err, full):
				t.Errorf("caller %d: got %v, want the quota's error", i, err)
			}
		})
	}
	wg.Wait()
	if got := ok.Load(); got != limit {
		t.Fatalf("got %d calls counted, want %d", got, limit)
	}
	// The refused callers' sessions were taken back: each may count once more
	// (their quota is used up, so count their sessions alone).
	refused := 0
	for i := range callers {
		_, err := stores[0].Count(t.Context(), []tools.Counter{{Key: "session.t" + strconv.Itoa(i), Limit: 1, Full: full}})
		if err == nil {
			refused++
		}
	}
	if refused != callers-limit {
		t.Errorf("got %d sessions free again, want the %d refused callers'", refused, callers-limit)
	}
}
