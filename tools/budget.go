package tools

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// budgets enforces the policy's budgets: a token bucket and a concurrency
// limit per server and per tool (in this process), and, in the LimitStore
// every runner on the bus shares, the daily quotas per server and per tool,
// the per-thread session limit and the global concurrency limit.
type budgets struct {
	policy *mcpconfig.Policy
	store  LimitStore
	now    func() time.Time

	mu     sync.Mutex
	limits map[string]*limit
}

type limit struct {
	lim   *rate.Limiter // nil: no rate limit
	sem   chan struct{} // nil: no concurrency limit
	quota int           // 0: none
	full  error         // the error of a used-up quota
}

func newBudgets(p *mcpconfig.Policy, store LimitStore, now func() time.Time) *budgets {
	return &budgets{policy: p, store: store, now: now, limits: map[string]*limit{}}
}

// limitFor returns the limit of a budget key, or nil when it has no budget.
func (b *budgets) limitFor(key string) *limit {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l, ok := b.limits[key]; ok {
		return l
	}
	bud, ok := b.policy.Budgets[key]
	var l *limit
	if ok && (bud.RPS > 0 || bud.Concurrency > 0 || bud.DailyQuota > 0) {
		l = &limit{quota: bud.DailyQuota,
			full: fmt.Errorf("%w: budget %s allows %d calls a day", ErrQuotaExhausted, key, bud.DailyQuota)}
		if bud.RPS > 0 {
			l.lim = rate.NewLimiter(rate.Limit(bud.RPS), bud.Burst)
		}
		if bud.Concurrency > 0 {
			l.sem = make(chan struct{}, bud.Concurrency)
		}
	}
	b.limits[key] = l
	return l
}

// admit applies the budgets of e's server and server.tool and the global
// limits, and returns the function that releases the concurrency slots
// taken. Rate limits wait for a token when it comes before ctx's deadline
// and fail with ErrRateLimited otherwise; quotas fail with
// ErrQuotaExhausted and the session limit with ErrLimitExceeded; a budget's
// concurrency waits until ctx ends (ErrTimeout or ErrCancelled), the global
// one too (ErrLimitExceeded at the deadline).
func (b *budgets) admit(ctx context.Context, e Execution) (release func(), err error) {
	ls := make([]*limit, 0, 2)
	keys := make([]string, 0, 2)
	for _, k := range [...]string{e.Server, e.Server + "." + e.Tool} {
		if l := b.limitFor(k); l != nil {
			ls = append(ls, l)
			keys = append(keys, k)
		}
	}
	if err := reserveRate(ctx, ls, keys); err != nil {
		return nil, err
	}
	undo := func() {}
	if counters := b.counters(e, ls, keys); len(counters) > 0 {
		if undo, err = b.store.Count(ctx, counters); err != nil {
			return nil, err
		}
	}
	releaseSems, err := acquireSems(ctx, ls)
	if err != nil {
		undo()
		return nil, err
	}
	releaseSlot, err := b.acquireSlot(ctx, e)
	if err != nil {
		releaseSems()
		undo()
		return nil, err
	}
	return func() { releaseSlot(); releaseSems() }, nil
}

// counters are the counts e adds to: its thread's session and the daily
// quotas of its budgets.
func (b *budgets) counters(e Execution, ls []*limit, keys []string) []Counter {
	var out []Counter
	if n := b.policy.Limits.PerSession; e.Thread != "" && n > 0 {
		out = append(out, Counter{Key: "session." + e.Thread, Limit: n, Full: &sessionFull{thread: e.Thread, limit: n}})
	}
	var day string
	for i, l := range ls {
		if l.quota == 0 {
			continue
		}
		if day == "" {
			day = b.now().UTC().Format(time.DateOnly)
		}
		out = append(out, Counter{Key: "quota." + day + "." + keys[i], Limit: l.quota, Full: l.full})
	}
	return out
}

// sessionFull is the error of a thread at its session limit. Its message
// is built only when read, not on every call.
type sessionFull struct {
	thread string
	limit  int
}

func (e *sessionFull) Error() string {
	return fmt.Sprintf("%s: thread %s reached its session limit of %d executions (policy limits.perSession)", ErrLimitExceeded, e.thread, e.limit)
}

func (e *sessionFull) Unwrap() error { return ErrLimitExceeded }

// acquireSlot takes one of the global concurrency slots for e.
func (b *budgets) acquireSlot(ctx context.Context, e Execution) (func(), error) {
	n := b.policy.Limits.Concurrency
	release, err := b.store.Acquire(ctx, e, n)
	switch {
	case err == nil:
		return release, nil
	case err == context.DeadlineExceeded: // the wait for a slot, not a store failure it wrapped
		return nil, fmt.Errorf("%w: all %d execution slots (policy limits.concurrency) stayed taken until the call's timeout", ErrLimitExceeded, n)
	case ctx.Err() == context.DeadlineExceeded:
		return nil, fmt.Errorf("%w: no execution slot: %w", ErrTimeout, err)
	case ctx.Err() != nil:
		return nil, ctxErr(ctx)
	}
	return nil, fmt.Errorf("take an execution slot: %w", err)
}

// reserveRate waits for a token of every rate-limited budget: every bucket
// is reserved first, so a refusal consumes no token.
func reserveRate(ctx context.Context, ls []*limit, keys []string) error {
	var wait time.Duration
	reservations := make([]*rate.Reservation, 0, len(ls))
	cancelAll := func() {
		for _, r := range reservations {
			r.Cancel()
		}
	}
	deadline, hasDeadline := ctx.Deadline()
	now := time.Now()
	for i, l := range ls {
		if l.lim == nil {
			continue
		}
		r := l.lim.ReserveN(now, 1)
		reservations = append(reservations, r)
		d := r.DelayFrom(now)
		if !r.OK() || hasDeadline && now.Add(d).After(deadline) {
			cancelAll()
			return fmt.Errorf("%w: budget %s allows %g/s", ErrRateLimited, keys[i], float64(l.lim.Limit()))
		}
		wait = max(wait, d)
	}
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		cancelAll()
		return ctxErr(ctx)
	}
}

// acquireSems takes the budgets' concurrency slots: server, then tool.
func acquireSems(ctx context.Context, ls []*limit) (release func(), err error) {
	taken := make([]chan struct{}, 0, 2)
	release = func() {
		for _, s := range taken {
			<-s
		}
	}
	for _, l := range ls {
		if l.sem == nil {
			continue
		}
		select {
		case l.sem <- struct{}{}:
			taken = append(taken, l.sem)
		case <-ctx.Done():
			release()
			return nil, ctxErr(ctx)
		}
	}
	return release, nil
}

// ctxErr maps a done context to ErrTimeout or ErrCancelled.
func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("%w: %w", ErrTimeout, context.Cause(ctx))
	}
	return fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx))
}
