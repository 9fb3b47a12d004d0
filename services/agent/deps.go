package agent

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/remote"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// ToolLister lists the MCP tools a role may call at a place (a zero
// Location: anywhere; a binding of the place limits the servers). The tool
// runner answers this over NATS request/reply (tools.ListRemoteAt on
// rpc.tool.list); BusTools adapts it.
type ToolLister interface {
	Tools(ctx context.Context, role string, at mcpconfig.Location) ([]tools.ToolInfo, error)
}

// Memory is what the agent asks of the memory worker: a thread's session
// context, long-term memories for a query, and document references for
// retrieve_docs. *remote.Client (over the bus) and *memory.Memory
// (in-process) implement it.
type Memory interface {
	Context(ctx context.Context, thread string, budget int) (memory.SessionContext, error)
	Retrieve(ctx context.Context, q memory.Query) ([]memory.Ref, error)
	RetrieveDocs(ctx context.Context, query string, k int) ([]memory.Ref, error)
}

// BusMemory is a Memory over the bus: requests to the memory workers on
// <prefix>.rpc.memory.* (package memory/remote).
func BusMemory(nc *nats.Conn, prefix string, timeout time.Duration) Memory {
	return remote.NewClient(nc, prefix, timeout)
}

// DefaultToolsWait bounds the wait for the tool runner's first discovery.
const DefaultToolsWait = 10 * time.Second

// BusTools is a ToolLister over the bus: requests to the tool runners on
// <prefix>.rpc.tool.list, cached per role for ttl (a zero ttl does not cache).
// Before its first listing it waits, at most DefaultToolsWait (see
// SetWait), until the tool runner has finished the first connect attempt of
// every enabled server, so the first tasks after a start are not offered a
// partial tool list. It is safe for concurrent use.
func BusTools(nc *nats.Conn, prefix string, ttl time.Duration) *CachedTools {
	return &CachedTools{
		list: func(ctx context.Context, role string, at mcpconfig.Location) ([]tools.ToolInfo, error) {
			return tools.ListRemoteAt(ctx, nc, prefix, role, at)
		},
		pending: func(ctx context.Context) ([]string, error) {
			st, err := tools.StatusRemote(ctx, nc, prefix)
			if err != nil {
				return nil, err
			}
			return st.Pending, nil
		},
		wait:  DefaultToolsWait,
		ttl:   ttl,
		cache: map[string]cachedList{},
	}
}

// CachedTools caches a tool list per role and place. Failed listings are not
// cached.
type CachedTools struct {
	list    func(ctx context.Context, role string, at mcpconfig.Location) ([]tools.ToolInfo, error)
	pending func(ctx context.Context) ([]string, error)
	wait    time.Duration
	ttl     time.Duration
	mu      sync.Mutex
	cache   map[string]cachedList

	readyMu sync.Mutex // one task waits; the others wait for it
	ready   bool
}

// SetWait bounds the wait for the tool runner's first discovery; 0 or
// negative does not wait. Call it before the first Tools.
func (c *CachedTools) SetWait(d time.Duration) *CachedTools {
	c.wait = d
	return c
}

// awaitDiscovery waits once per process, at most c.wait, for the tool
// runner's first attempt at every enabled server.
func (c *CachedTools) awaitDiscovery(ctx context.Context) {
	c.readyMu.Lock()
	defer c.readyMu.Unlock()
	if c.ready || c.pending == nil || c.wait <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		p, err := c.pending(ctx)
		if err == nil && len(p) == 0 {
			c.ready = true
			return
		}
		select {
		case <-ctx.Done():
			// Bounded: later tasks do not wait again.
			c.ready = true
			return
		case <-t.C:
		}
	}
}

type cachedList struct {
	tools []tools.ToolInfo
	at    time.Time
}

// Tools implements ToolLister.
func (c *CachedTools) Tools(ctx context.Context, role string, at mcpconfig.Location) ([]tools.ToolInfo, error) {
	c.awaitDiscovery(ctx)
	key := role + "@" + at.String()
	if c.ttl > 0 {
		c.mu.Lock()
		e, ok := c.cache[key]
		c.mu.Unlock()
		if ok && time.Since(e.at) < c.ttl {
			return e.tools, nil
		}
	}
	list, err := c.list(ctx, role, at)
	if err != nil {
		return nil, err
	}
	if c.ttl > 0 {
		c.mu.Lock()
		c.cache[key] = cachedList{tools: list, at: time.Now()}
		c.mu.Unlock()
	}
	return list, nil
}

// Refresh drops the cached lists: the next task lists the tools again. The
// agent calls it when the tool runners announce a change (rpc.tool.refresh).
func (c *CachedTools) Refresh() {
	c.mu.Lock()
	clear(c.cache)
	c.mu.Unlock()
}

var (
	_ Memory = (*remote.Client)(nil)
	_ Memory = (*memory.Memory)(nil)
)
