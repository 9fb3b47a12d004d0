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
	plans  map[planKey]*plan
	day    quotaDay // the day of the quota keys last built
}

// planKey names the budgets a call of server.tool is under.
type planKey struct{ server, tool string }

// plan is what admit applies to a call of one server.tool, found once: the
// limits of its budgets (server, then server.tool) with their keys, and
// the day's quota counter keys of those with a daily quota.
type plan struct {
	ls   []*limit
	keys []string
	// quotaKeys[i] is "quota.<day>.<keys[i]>", for day; guarded by budgets.mu.
	quotaDay  string
	quotaKeys []string
}

// quotaDay caches the formatted day of a date.
type quotaDay struct {
	y    int
	m    time.Month
	d    int
	text string
}

type limit struct {
	lim   *rate.Limiter // nil: no rate limit
	sem   chan struct{} // nil: no concurrency limit
	quota int           // 0: none
	full  error         // the error of a used-up quota
}

func newBudgets(p *mcpconfig.Policy, store LimitStore, now func() time.Time) *budgets {
	return &budgets{policy: p, store: store, now: now, limits: map[string]*limit{}, plans: map[planKey]*plan{}}
}

// planFor returns the plan of server.tool.
func (b *budgets) planFor(server, tool string) *plan {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := planKey{server, tool}
	if p, ok := b.plans[k]; ok {
		return p
	}
	p := &plan{}
	for _, key := range [...]string{server, server + "." + tool} {
		if l := b.limitFor(key); l != nil {
			p.ls = append(p.ls, l)
			p.keys = append(p.keys, key)
		}
	}
	b.plans[k] = p
	return p
}

// limitFor returns the limit of a budget key, or nil when it has no
// budget. b.mu is held.
func (b *budgets) limitFor(key string) *limit {
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
// limits, and returns the concurrency slots taken (release them with
// held.release). Rate limits wait for a token when it comes before ctx's
// deadline and fail with ErrRateLimited otherwise; quotas fail with
// ErrQuotaExhausted and the session limit with ErrLimitExceeded; a budget's
// concurrency waits until ctx ends (ErrTimeout or ErrCancelled), the global
// one too (ErrLimitExceeded at the deadline).
func (b *budgets) admit(ctx context.Context, e Execution) (*held, error) {
	p := b.planFor(e.Server, e.Tool)
	if err := reserveRate(ctx, p.ls, p.keys); err != nil {
		return nil, err
	}
	counters := b.counters(e, p)
	if len(counters) == 0 {
		return b.take(ctx, e, p)
	}
	if _, local := b.store.(*MemoryLimits); !local {
		return b.countWhileTaking(ctx, e, p, counters)
	}
	undo, err := b.store.Count(ctx, counters)
	if err != nil {
		return nil, err
	}
	h, err := b.take(ctx, e, p)
	if err != nil {
		undo()
		return nil, err
	}
	return h, nil
}

// countWhileTaking counts e while it takes its slots: in a store on the
// bus each is a round trip, and the call then waits for one instead of
// two. A refused count ends the wait for slots; a call refused either way
// keeps neither its counts nor its slots.
func (b *budgets) countWhileTaking(ctx context.Context, e Execution, p *plan, counters []Counter) (*held, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type counted struct {
		undo func()
		err  error
	}
	ch := make(chan counted, 1)
	go func() {
		undo, err := b.store.Count(ctx, counters)
		if err != nil {
			cancel()
		}
		ch <- counted{undo, err}
	}()
	h, err := b.take(ctx, e, p)
	c := <-ch
	switch {
	case c.err != nil:
		if err == nil {
			h.release()
		}
		return nil, c.err
	case err != nil:
		c.undo()
		return nil, err
	}
	return h, nil
}

// held are the concurrency slots a call took: its budgets' (server, then
// tool: a plan has two limits at most) and a global one.
type held struct {
	sems [2]chan struct{}
	n    int
	slot func()
}

// release gives the slots back.
func (h *held) release() {
	if h.slot != nil {
		h.slot()
	}
	h.releaseSems()
}

func (h *held) releaseSems() {
	for _, s := range h.sems[:h.n] {
		<-s
	}
	h.n = 0
}

// take takes e's budget concurrency slots, then a global one.
func (b *budgets) take(ctx context.Context, e Execution, p *plan) (*held, error) {
	h := &held{}
	if err := h.acquireSems(ctx, p.ls); err != nil {
		return nil, err
	}
	slot, err := b.acquireSlot(ctx, e)
	if err != nil {
		h.releaseSems()
		return nil, err
	}
	h.slot = slot
	return h, nil
}

// counters are the counts e adds to: its thread's session and the daily
// quotas of its budgets.
func (b *budgets) counters(e Execution, p *plan) []Counter {
	var out []Counter
	if n := b.policy.Limits.PerSession; e.Thread != "" && n > 0 {
		out = append(out, Counter{Key: "session." + e.Thread, Limit: n, Full: &sessionFull{thread: e.Thread, limit: n}})
	}
	var keys []string
	for i, l := range p.ls {
		if l.quota == 0 {
			continue
		}
		if keys == nil {
			keys = b.quotaKeys(p)
		}
		out = append(out, Counter{Key: keys[i], Limit: l.quota, Full: l.full})
	}
	return out
}

// quotaKeys returns p's quota counter keys of today (b.now, UTC), building
// them once a day.
func (b *budgets) quotaKeys(p *plan) []string {
	y, m, d := b.now().UTC().Date()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.day.y != y || b.day.m != m || b.day.d != d || b.day.text == "" {
		b.day = quotaDay{y, m, d, time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)}
	}
	if p.quotaDay != b.day.text {
		keys := make([]string, len(p.keys))
		for i, k := range p.keys {
			keys[i] = "quota." + b.day.text + "." + k
		}
		p.quotaDay, p.quotaKeys = b.day.text, keys
	}
	return p.quotaKeys
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
	deadline, hasDeadline := ctx.Deadline()
	now := time.Now()
	var lone *rate.Limiter
	n := 0
	for _, l := range ls {
		if l.lim != nil {
			lone, n = l.lim, n+1
		}
	}
	switch {
	case n == 0:
		return nil
	case n == 1 && (!hasDeadline || !now.After(deadline)) && lone.AllowN(now, 1):
		return nil // a lone bucket's token to spare, without a reservation
	}
	var wait time.Duration
	reservations := make([]*rate.Reservation, 0, len(ls))
	cancelAll := func() {
		for _, r := range reservations {
			r.Cancel()
		}
	}
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
func (h *held) acquireSems(ctx context.Context, ls []*limit) error {
	for _, l := range ls {
		if l.sem == nil {
			continue
		}
		select {
		case l.sem <- struct{}{}:
			h.sems[h.n] = l.sem
			h.n++
		case <-ctx.Done():
			h.releaseSems()
			return ctxErr(ctx)
		}
	}
	return nil
}

// ctxErr maps a done context to ErrTimeout or ErrCancelled.
func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		cause := context.Cause(ctx)
		if ct, ok := cause.(*callTimeout); ok {
			if f := callOf(ctx); f != nil && f.run != nil {
				return fmt.Errorf("%w: %w", ErrTimeout, f.run.r.timeoutError(ct))
			}
		}
		return fmt.Errorf("%w: %w", ErrTimeout, cause)
	}
	cause := context.Cause(ctx)
	if f := callOf(ctx); f != nil && f.run != nil {
		if c := f.run.cancelCause(); c != nil { // Runner.Cancel
			cause = c
		}
	}
	return fmt.Errorf("%w: %w", ErrCancelled, cause)
}
