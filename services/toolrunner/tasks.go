package toolrunner

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/tools"
)

// SubjectProgress carries the status of a call that runs as an MCP task
// (one system envelope per status change, meta.tool_progress): the agent
// updates a code-block run's Slack message with it, the console shows it.
const SubjectProgress = envelope.SubjectToolProgress

// KVTasks is the tools.TaskStore of the tool runners on a bus: the
// JetStream key-value bucket "<PREFIX>_TOOLTASKS" (replicated like every
// bucket), key "t.<base64url of the call id>", value the JSON
// tools.TaskRecord. A record lives until its call completes, at most the
// bucket's TTL (the call record's, 24h by default).
type KVTasks struct{ kv jetstream.KeyValue }

// TaskBucket returns the name of the task bucket for a bus prefix.
func TaskBucket(prefix string) string { return bucketName(prefix, "TOOLTASKS") }

// OpenTasks creates or opens the task bucket of b; ttl 0 keeps records for ever.
func OpenTasks(ctx context.Context, b *bus.Bus, ttl time.Duration) (*KVTasks, error) {
	kv, err := b.OpenBucket(ctx, TaskBucket(b.Prefix()), "relay tool runner: MCP tasks of tool calls in flight, polled again after a restart", ttl)
	if err != nil {
		return nil, err
	}
	return &KVTasks{kv: kv}, nil
}

func taskKey(callID string) string {
	return "t." + base64.RawURLEncoding.EncodeToString([]byte(callID))
}

// LoadTask implements tools.TaskStore.
func (k *KVTasks) LoadTask(ctx context.Context, callID string) (*tools.TaskRecord, error) {
	e, err := k.kv.Get(ctx, taskKey(callID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read task of call %s: %w", callID, err)
	}
	var t tools.TaskRecord
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return nil, fmt.Errorf("task of call %s: %w", callID, err)
	}
	return &t, nil
}

// SaveTask implements tools.TaskStore.
func (k *KVTasks) SaveTask(ctx context.Context, t *tools.TaskRecord) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if _, err := k.kv.Put(ctx, taskKey(t.CallID), b); err != nil {
		return fmt.Errorf("store task %s of call %s: %w", t.TaskID, t.CallID, err)
	}
	return nil
}

// DeleteTask implements tools.TaskStore.
func (k *KVTasks) DeleteTask(ctx context.Context, callID string) error {
	if err := k.kv.Delete(ctx, taskKey(callID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete task of call %s: %w", callID, err)
	}
	return nil
}

// pending reports whether call id has a stored task.
func (k *KVTasks) pending(ctx context.Context, callID string) (bool, error) {
	t, err := k.LoadTask(ctx, callID)
	return t != nil, err
}

// progress returns the TaskStatus of call: each status of its task becomes
// a system envelope on SubjectProgress, replying to the call (its thread,
// task and meta.agent, where a code-block run keeps its Slack message).
func (s *Service) progress(ctx context.Context, call *envelope.Envelope) func(tools.ProgressEvent) {
	var mu sync.Mutex
	last := ""
	return func(ev tools.ProgressEvent) {
		mu.Lock()
		same := ev.Status+"\x00"+ev.Message == last
		last = ev.Status + "\x00" + ev.Message
		mu.Unlock()
		if same {
			return
		}
		e := call.Reply(envelope.ChannelInternal, envelope.RoleSystem, fmt.Sprintf("%s: %s", call.ToolCall.Name, ev.Message))
		e.ID = envelope.DerivedID("relay-tool-progress:" + call.ID + ":" + ev.Task + ":" + ev.Status + ":" + ev.Message)
		e.Meta.Set("in_reply_to", call.ID)
		e.Meta.Set("tool_progress", map[string]any{"tool": call.ToolCall.Name, "mcp_task_id": ev.Task, "status": ev.Status, "message": ev.Message})
		if a, ok := call.Meta.Get("agent"); ok {
			e.Meta.Set("agent", a)
		}
		if _, err := s.bus.Publish(ctx, SubjectProgress, e, bus.WithMsgID(e.ID)); err != nil {
			s.log.Warn("task progress not published", "envelope_id", call.ID, "err", err)
		}
	}
}
