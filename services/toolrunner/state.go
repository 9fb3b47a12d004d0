package toolrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/tools"
)

// KVState is a tools.StateStore in a JetStream key-value bucket
// ("<PREFIX>_TOOLRUNNER"): key "server.<name>" holds a tools.ServerState as
// JSON, key "stop" holds "true" or "false". `relay mcp enable|disable` write
// it; every runner watches it. Safe for concurrent use.
type KVState struct {
	kv jetstream.KeyValue
}

// StateBucket returns the bucket name for a bus prefix.
func StateBucket(prefix string) string { return bucketName(prefix, "TOOLRUNNER") }

func bucketName(prefix, kind string) string {
	return strings.ToUpper(strings.ReplaceAll(prefix, "-", "_")) + "_" + kind
}

// OpenState creates or opens the state bucket of b.
func OpenState(ctx context.Context, b *bus.Bus) (*KVState, error) {
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      StateBucket(b.Prefix()),
		Description: "relay tool runner: enabled/disabled MCP servers and the stop switch",
		History:     5,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("open state bucket %s: %w", StateBucket(b.Prefix()), err)
	}
	return &KVState{kv: b.Bucket(kv)}, nil
}

const (
	serverKeyPrefix = "server."
	stopKey         = "stop"
)

// Load implements tools.StateStore.
func (s *KVState) Load(ctx context.Context) (tools.State, error) {
	st := tools.State{Servers: map[string]tools.ServerState{}}
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return st, fmt.Errorf("list state keys: %w", err)
	}
	for k := range keys.Keys() {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("get state %s: %w", k, err)
		}
		apply(&st, e)
	}
	return st, nil
}

func apply(st *tools.State, e jetstream.KeyValueEntry) {
	deleted := e.Operation() != jetstream.KeyValuePut
	switch k := e.Key(); {
	case k == stopKey:
		st.Stop = !deleted && string(e.Value()) == "true"
	case strings.HasPrefix(k, serverKeyPrefix):
		name := strings.TrimPrefix(k, serverKeyPrefix)
		if deleted {
			delete(st.Servers, name)
			return
		}
		var ss tools.ServerState
		if json.Unmarshal(e.Value(), &ss) == nil {
			st.Servers[name] = ss
		}
	}
}

// SetServer implements tools.StateStore.
func (s *KVState) SetServer(ctx context.Context, name string, st tools.ServerState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, serverKeyPrefix+name, b); err != nil {
		return fmt.Errorf("store state of %s: %w", name, err)
	}
	return nil
}

// SetStop implements tools.StateStore.
func (s *KVState) SetStop(ctx context.Context, stop bool) error {
	v := "false"
	if stop {
		v = "true"
	}
	if _, err := s.kv.Put(ctx, stopKey, []byte(v)); err != nil {
		return fmt.Errorf("store stop switch: %w", err)
	}
	return nil
}

// Watch implements tools.StateStore: fn gets the whole state after the
// initial values and after every change.
func (s *KVState) Watch(ctx context.Context, fn func(tools.State)) error {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch state: %w", err)
	}
	defer func() { _ = w.Stop() }()
	st := tools.State{Servers: map[string]tools.ServerState{}}
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("state watcher closed")
			}
			if e == nil { // initial values done
				initial = false
				fn(copyState(st))
				continue
			}
			apply(&st, e)
			if !initial {
				fn(copyState(st))
			}
		}
	}
}

func copyState(st tools.State) tools.State {
	out := tools.State{Servers: make(map[string]tools.ServerState, len(st.Servers)), Stop: st.Stop}
	for k, v := range st.Servers {
		out.Servers[k] = v
	}
	return out
}
