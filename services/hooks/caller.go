package hooks

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
)

// callReply is the part of a tool-result envelope the hooks read.
type callReply struct {
	Content  string `json:"content"`
	ToolCall *struct {
		Result map[string]any `json:"result"`
	} `json:"tool_call"`
	Meta struct {
		InReplyTo string `json:"in_reply_to"`
		AuditID   string `json:"audit_id"`
	} `json:"meta"`
}

// busCaller calls tools through the tool runner: it publishes tool.call
// envelopes and waits for the tool.result / tool.failed envelope whose
// meta.in_reply_to names the call. It listens on plain NATS subscriptions
// (the results are also in the work stream, where the agent reads them).
type busCaller struct {
	b       *bus.Bus
	mu      sync.Mutex
	pending map[string]chan callReply
	subs    []*nats.Subscription
}

func newBusCaller(b *bus.Bus) *busCaller {
	return &busCaller{b: b, pending: map[string]chan callReply{}}
}

// start subscribes to the result subjects; stop unsubscribes.
func (c *busCaller) start() error {
	for _, rel := range []string{envelope.SubjectToolResult, envelope.SubjectToolFailed} {
		sub, err := c.b.Conn().Subscribe(c.b.Subject(rel), c.deliver)
		if err != nil {
			c.stop()
			return fmt.Errorf("subscribe %s: %w", rel, err)
		}
		c.subs = append(c.subs, sub)
	}
	return c.b.Conn().Flush()
}

func (c *busCaller) stop() {
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
	c.subs = nil
}

func (c *busCaller) deliver(m *nats.Msg) {
	var r callReply
	if json.Unmarshal(m.Data, &r) != nil || r.Meta.InReplyTo == "" {
		return
	}
	c.mu.Lock()
	ch := c.pending[r.Meta.InReplyTo]
	delete(c.pending, r.Meta.InReplyTo)
	c.mu.Unlock()
	if ch != nil {
		ch <- r
	}
}

// call publishes the call envelope and waits for its result until ctx ends.
func (c *busCaller) call(ctx context.Context, call *envelope.Envelope, msgID string) (callReply, error) {
	ch := make(chan callReply, 1)
	c.mu.Lock()
	c.pending[call.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, call.ID)
		c.mu.Unlock()
	}()
	if _, err := c.b.Publish(ctx, envelope.SubjectToolCall, call, bus.WithMsgID(msgID)); err != nil {
		return callReply{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return callReply{}, ctx.Err()
	}
}
