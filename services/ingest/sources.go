package ingest

import (
	"sync"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
)

// sourceSlots bounds the publishes of one source (a repository, a Slack
// channel, a Sentry organisation, an OpenProject host) in flight at once
// (Config.MaxInflightPerSource). Past it a request is answered 503 with
// Retry-After at once instead of waiting behind its own source's backlog:
// one flooded source then holds a bounded number of requests (their bodies,
// buffers and goroutines), and the other sources' webhooks find the bus
// without a queue of the flood's in front of them. Safe for concurrent use;
// it holds an entry only for a source with a publish in flight.
type sourceSlots struct {
	per int // 0: no limit
	mu  sync.Mutex
	n   map[string]int
}

func newSourceSlots(per int) *sourceSlots {
	return &sourceSlots{per: per, n: map[string]int{}}
}

// acquire takes a slot of source ("" and a limit of 0 always succeed, and
// need no release) and reports whether it got one.
func (c *sourceSlots) acquire(source string) bool {
	if c.per <= 0 || source == "" {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[source] >= c.per {
		return false
	}
	c.n[source]++
	return true
}

// release gives back a slot acquire gave for source.
func (c *sourceSlots) release(source string) {
	if c.per <= 0 || source == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[source] <= 1 {
		delete(c.n, source)
		return
	}
	c.n[source]--
}

// itemsSource is the source the items of one webhook are counted against:
// that of the first with a thread of a known source, else "".
func itemsSource(items []mappers.Item) string {
	for _, it := range items {
		if it.Envelope == nil {
			continue
		}
		if _, src := envelope.ThreadSource(it.Envelope.Meta.Thread); src != "" {
			return src
		}
	}
	return ""
}
