package tools

import (
	"context"
	"reflect"
	"time"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// liveConns is what Reload needs beside conns and order, guarded by
// Runner.connsMu.
type liveConns struct {
	// life is the runner's lifetime (set by Start): servers added later run
	// under it. Nil before Start.
	life context.Context
	// stops end one server's health loop.
	stops map[*conn]context.CancelFunc
}

// ReloadResult says what Reload changed, by server name.
type ReloadResult struct {
	Added, Removed, Restarted []string
}

// Changed reports whether Reload changed anything.
func (r ReloadResult) Changed() bool {
	return len(r.Added)+len(r.Removed)+len(r.Restarted) > 0
}

// conn returns the named server's connection, or nil.
func (r *Runner) conn(name string) *conn {
	r.connsMu.RLock()
	defer r.connsMu.RUnlock()
	return r.conns[name]
}

// list returns the connections in configuration order.
func (r *Runner) list() []*conn {
	r.connsMu.RLock()
	defer r.connsMu.RUnlock()
	out := make([]*conn, len(r.order))
	for i, n := range r.order {
		out[i] = r.conns[n]
	}
	return out
}

// acquire returns the named server's connection counted as busy until
// release; nil when there is none. The count is taken under connsMu, so a
// Reload that removes the server (under the write lock) is followed by a
// drain that sees it.
func (r *Runner) acquire(name string) *conn {
	r.connsMu.RLock()
	defer r.connsMu.RUnlock()
	c := r.conns[name]
	if c != nil {
		c.busy.Add(1)
	}
	return c
}

func (r *Runner) release(c *conn) { c.busy.Add(-1) }

func (r *Runner) setLife(ctx context.Context) {
	r.connsMu.Lock()
	defer r.connsMu.Unlock()
	r.live.life = ctx
}

// startConn runs a server's health loop (its first check connects) under
// the runner's lifetime; the caller has checked that Start ran.
func (r *Runner) startConn(c *conn) {
	r.connsMu.Lock()
	life := r.live.life
	ctx, cancel := context.WithCancel(life)
	if r.live.stops == nil {
		r.live.stops = map[*conn]context.CancelFunc{}
	}
	r.live.stops[c] = cancel
	r.wg.Add(1)
	r.connsMu.Unlock()
	go func() {
		defer r.wg.Done()
		c.run(ctx)
	}()
}

// sameServer reports whether two entries would run the same server (the
// line an entry starts on does not count).
func sameServer(a, b mcpconfig.Server) bool {
	a.Line, b.Line = 0, 0
	return reflect.DeepEqual(a, b)
}

// drainPoll is how often a removed server is checked for calls in flight.
const drainPoll = 50 * time.Millisecond

// Reload makes servers the runner's configuration (a new mcp.json): it
// starts added servers, stops removed ones once their calls in flight have
// finished (at most mcpconfig.MaxTimeout), and restarts changed ones (a new
// session and an empty tool cache). Added and restarted servers take their
// persisted state (Config.State) as at Start. Unchanged servers keep their session and
// health, but their tool lists are fetched again on next use (a reload is
// also how an operator says a server's tools changed). Calls that begin after Reload see the new set.
// A policy binding that names a server no longer configured is logged as a warning.
// Safe to call concurrently with calls; before Start it only replaces the
// configuration.
func (r *Runner) Reload(servers []mcpconfig.Server) ReloadResult {
	var res ReloadResult
	if r.closing.Load() {
		return res
	}
	// The servers started take their persisted state before anyone sees
	// them, as at startup: a server an operator disabled stays disabled.
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	r.connsMu.Lock()
	if r.live.life != nil && r.live.life.Err() != nil {
		r.connsMu.Unlock()
		return res // closing
	}
	started := r.live.life != nil
	next := make(map[string]*conn, len(servers))
	order := make([]string, 0, len(servers))
	var start, stop []*conn
	for _, s := range servers {
		old := r.conns[s.Name]
		switch {
		case old != nil && sameServer(old.cfg, s):
			next[s.Name] = old
			old.invalidateTools()
		case old != nil:
			c := newConn(r, s)
			next[s.Name], start, stop = c, append(start, c), append(stop, old)
			res.Restarted = append(res.Restarted, s.Name)
		default:
			c := newConn(r, s)
			next[s.Name], start = c, append(start, c)
			res.Added = append(res.Added, s.Name)
		}
		order = append(order, s.Name)
	}
	for _, name := range r.order {
		if _, kept := next[name]; !kept {
			stop = append(stop, r.conns[name])
			res.Removed = append(res.Removed, name)
		}
	}
	for _, c := range start {
		if st, ok := r.servers[c.cfg.Name]; ok {
			applyServerState(c, st) // a fresh conn: never a notice
		}
	}
	r.conns, r.order = next, order
	if started {
		r.wg.Add(len(stop))
	}
	r.connsMu.Unlock()
	if err := r.cfg.Policy.CheckServers(order); err != nil {
		// Checked at start; a reload (an uninstall, an edit) is applied
		// anyway: those bindings offer nothing of the missing server.
		r.log.Warn("policy bindings name servers no longer in mcp.json", "err", err)
	}
	if !started {
		return res
	}
	for _, c := range start {
		r.startConn(c)
	}
	for _, c := range stop {
		go func() {
			defer r.wg.Done()
			r.drain(c)
		}()
	}
	if res.Changed() {
		r.log.Info("mcp servers reloaded", "added", res.Added, "removed", res.Removed, "restarted", res.Restarted)
	}
	return res
}

// drain waits until a removed server has no call in flight (or the runner
// stops, or mcpconfig.MaxTimeout passes), then stops it.
func (r *Runner) drain(c *conn) {
	deadline := time.Now().Add(mcpconfig.MaxTimeout)
	r.connsMu.RLock()
	life := r.live.life
	r.connsMu.RUnlock()
	for time.Now().Before(deadline) && life.Err() == nil {
		if c.busy.Load() <= 0 {
			break
		}
		select {
		case <-life.Done():
		case <-time.After(drainPoll):
		}
	}
	r.connsMu.Lock()
	cancel := r.live.stops[c]
	delete(r.live.stops, c)
	r.connsMu.Unlock()
	if cancel != nil {
		cancel()
	}
	c.close()
}
