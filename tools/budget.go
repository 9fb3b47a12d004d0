package tools

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// budgets enforces the policy's budgets: a token bucket, a concurrency limit
// and a daily quota per server and per tool, and the global concurrency limit.
// Quotas are counted in this process (they reset at UTC midnight and on restart).
type budgets struct {
	policy *mcpconfig.Policy
	global chan struct{}
	now    func() time.Time

	mu     sync.Mutex
	limits map[string]*limit
}

type limit struct {
	lim   *rate.Limiter // nil: no rate limit
	sem   chan struct{} // nil: no concurrency limit
	quota int           // 0: none

	mu   sync.Mutex
	day  string
	used int
}

func newBudgets(p *mcpconfig.Policy, now func() time.Time) *budgets {
	return &budgets{policy: p, global: make(chan struct{}, p.Limits.Concurrency), now: now, limits: map[string]*limit{}}
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
		l = &limit{quota: bud.DailyQuota}
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

// admit applies the budgets of server and server.tool and returns the
// function that releases the concurrency slots taken. Rate limits wait for a
// token when it comes before ctx's deadline and fail with ErrRateLimited
// otherwise; quotas fail with ErrQuotaExhausted; concurrency waits until ctx
// ends (ErrTimeout or ErrCancelled).
func (b *budgets) admit(ctx context.Context, server, tool string) (release func(), err error) {
	ls := make([]*limit, 0, 2)
	keys := make([]string, 0, 2)
	for _, k := range [...]string{server, server + "." + tool} {
		if l := b.limitFor(k); l != nil {
			ls = append(ls, l)
			keys = append(keys, k)
		}
	}
	if err := reserveRate(ctx, ls, keys); err != nil {
		return nil, err
	}
	if err := b.countQuota(ls, keys); err != nil {
		return nil, err
	}
	return b.acquireSlots(ctx, ls)
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

// countQuota counts the call against every daily quota, undoing the counts
// already taken when one is used up.
func (b *budgets) countQuota(ls []*limit, keys []string) error {
	day := b.now().UTC().Format(time.DateOnly)
	for i, l := range ls {
		if l.quota == 0 {
			continue
		}
		l.mu.Lock()
		if l.day != day {
			l.day, l.used = day, 0
		}
		if l.used >= l.quota {
			l.mu.Unlock()
			for _, u := range ls[:i] {
				u.unuse()
			}
			return fmt.Errorf("%w: budget %s allows %d calls a day", ErrQuotaExhausted, keys[i], l.quota)
		}
		l.used++
		l.mu.Unlock()
	}
	return nil
}

// acquireSlots takes a concurrency slot: global, then server, then tool.
func (b *budgets) acquireSlots(ctx context.Context, ls []*limit) (release func(), err error) {
	taken := make([]chan struct{}, 0, 3)
	release = func() {
		for _, s := range taken {
			<-s
		}
	}
	sems := []chan struct{}{b.global}
	for _, l := range ls {
		if l.sem != nil {
			sems = append(sems, l.sem)
		}
	}
	for _, s := range sems {
		select {
		case s <- struct{}{}:
			taken = append(taken, s)
		case <-ctx.Done():
			release()
			return nil, ctxErr(ctx)
		}
	}
	return release, nil
}

func (l *limit) unuse() {
	if l.quota == 0 {
		return
	}
	l.mu.Lock()
	if l.used > 0 {
		l.used--
	}
	l.mu.Unlock()
}

// ctxErr maps a done context to ErrTimeout or ErrCancelled.
func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("%w: %w", ErrTimeout, context.Cause(ctx))
	}
	return fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx))
}
