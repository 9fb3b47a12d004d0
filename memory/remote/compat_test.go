package remote

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/longterm"
)

// The request/reply code of memory workers before nats.go/micro, kept here
// to test a rolling restart both ways: oldCall is how their clients decoded
// a reply; oldServe is how they answered (one wildcard subscription in the
// queue group "memory", the error only in the body).

type oldReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Code   string          `json:"code,omitempty"`
}

func oldCall(ctx context.Context, nc *nats.Conn, prefix, op string, req, res any) (code string, err error) {
	data, _ := json.Marshal(req)
	msg, err := nc.RequestWithContext(ctx, prefix+".rpc.memory."+op, data)
	if err != nil {
		return "", err
	}
	var rep oldReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return "", err
	}
	if rep.Error != "" {
		return rep.Code, errors.New(rep.Error)
	}
	return "", json.Unmarshal(rep.Result, res)
}

func oldServe(t *testing.T, nc *nats.Conn, prefix string, b Backend) {
	t.Helper()
	sub, err := nc.QueueSubscribe(prefix+".rpc.memory.*", "memory", func(msg *nats.Msg) {
		op := msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
		res, err := handle(context.Background(), b, op, msg.Data)
		var rep oldReply
		if err != nil {
			rep.Error, rep.Code = err.Error(), CodeUnavailable
			var bad *badRequest
			if errors.As(err, &bad) || errors.Is(err, memory.ErrBadUpdate) || errors.Is(err, memory.ErrEmptyQuery) {
				rep.Code = CodeBadRequest
			}
		} else {
			rep.Result, _ = json.Marshal(res)
		}
		data, _ := json.Marshal(rep)
		_ = msg.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// serve runs Serve until the returned stop is called (also at cleanup) and
// returns once the service answers $SRV.PING.
func serve(t testing.TB, nc *nats.Conn, prefix string, b Backend) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, nc, b, ServerConfig{Prefix: prefix}) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := nc.Request("$SRV.PING."+ServiceName, nil, time.Second); err == nil {
			return stop
		}
		select {
		case err := <-done:
			t.Fatalf("Serve returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("memory service did not answer $SRV.PING within 10s")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

// counting counts the notes remembered through it.
type counting struct {
	Backend
	remembered *atomic.Int32
}

func (c counting) Remember(ctx context.Context, n memory.Note) (longterm.Memory, error) {
	c.remembered.Add(1)
	return c.Backend.Remember(ctx, n)
}

// TestOldClientNewWorker: a client from before micro reads the worker's
// replies, errors and their codes included, as it always did.
func TestOldClientNewWorker(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	serve(t, b.Conn(), b.Prefix(), newMemory(t))
	nc := bustest.Connect(t, b).Conn()
	ctx := t.Context()
	var m longterm.Memory
	if _, err := oldCall(ctx, nc, b.Prefix(), "remember", memory.Note{Text: "deploys run at noon", Thread: "github:o/r#1"}, &m); err != nil || m.ID == "" {
		t.Fatalf("remember: got %+v, %v", m, err)
	}
	var refs struct{ Refs []memory.Ref }
	if _, err := oldCall(ctx, nc, b.Prefix(), "retrieve", memory.Query{Text: "when are deploys", K: 2}, &refs); err != nil || len(refs.Refs) != 1 || refs.Refs[0].ID != m.ID {
		t.Fatalf("retrieve: got %+v, %v", refs, err)
	}
	var sc memory.SessionContext
	code, err := oldCall(ctx, nc, b.Prefix(), "context", map[string]any{"thread": ""}, &sc)
	if err == nil || code != CodeBadRequest || err.Error() != "thread is required" {
		t.Errorf("bad request: got code %q, %v; want bad_request and the message in the body", code, err)
	}
	// A new client reads the same failure from micro's headers.
	msg, err := nc.RequestWithContext(ctx, Subject(b.Prefix(), "context"), []byte(`{"thread":""}`))
	if err != nil {
		t.Fatal(err)
	}
	if e := rpc.ReplyError(msg); e == nil || e.Code != rpc.CodeBadRequest || e.Message != "thread is required" {
		t.Errorf("headers: got %+v, want code 400 and the message", e)
	}
}

// TestNewClientOldWorker: the Client reads a worker from before micro,
// including the error it put only in the body.
func TestNewClientOldWorker(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	oldServe(t, b.Conn(), b.Prefix(), newMemory(t))
	c := NewClient(bustest.Connect(t, b).Conn(), b.Prefix(), 10*time.Second)
	ctx := t.Context()
	m, err := c.Remember(ctx, memory.Note{Text: "deploys run at noon", Thread: "github:o/r#1"})
	if err != nil || m.ID == "" {
		t.Fatalf("remember: got %+v, %v", m, err)
	}
	refs, err := c.Retrieve(ctx, memory.Query{Text: "when are deploys", K: 2})
	if err != nil || len(refs) != 1 || refs[0].ID != m.ID {
		t.Fatalf("retrieve: got %+v, %v", refs, err)
	}
	var e *Error
	if _, err := c.Retrieve(ctx, memory.Query{}); !errors.As(err, &e) || e.Code != CodeBadRequest || e.Op != "retrieve" {
		t.Errorf("bad request: got %v, want a bad_request *Error", err)
	}
}

// TestRollingRestart: an old and a new worker side by side share the queue
// group, so each write runs exactly once.
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	mem := newMemory(t)
	var oldCount, newCount atomic.Int32
	oldServe(t, bustest.Connect(t, b).Conn(), b.Prefix(), counting{mem, &oldCount})
	serve(t, b.Conn(), b.Prefix(), counting{mem, &newCount})
	c := NewClient(bustest.Connect(t, b).Conn(), b.Prefix(), 10*time.Second)
	const n = 30
	for i := range n {
		if _, err := c.Remember(t.Context(), memory.Note{Text: "note " + strings.Repeat("x", i+1), Thread: "github:o/r#2"}); err != nil {
			t.Fatal(err)
		}
	}
	if o, nw := oldCount.Load(), newCount.Load(); o+nw != n {
		t.Errorf("old worker ran %d, new worker %d; want %d in all (each request once)", o, nw, n)
	}
}

// TestWorkerServiceLifecycle: while Serve runs, $SRV discovers one endpoint
// per operation on the prefixed subjects; once it returned, nothing answers
// and the client says which command to start.
func TestWorkerServiceLifecycle(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	stop := serve(t, b.Conn(), b.Prefix(), newMemory(t))
	nc := bustest.Connect(t, b).Conn()
	found, err := rpc.Discover(t.Context(), nc, b.Prefix(), time.Second)
	if err != nil || len(found) != 1 {
		t.Fatalf("discover: got %+v, %v; want one instance", found, err)
	}
	info := found[0].Info
	if info.Name != ServiceName || len(info.Endpoints) != len(Ops) || info.Metadata[rpc.MetadataPrefix] != b.Prefix() {
		t.Errorf("info: got %+v, want %d endpoints", info, len(Ops))
	}
	for _, ep := range info.Endpoints {
		if ep.Subject != Subject(b.Prefix(), ep.Name) || ep.QueueGroup != QueueGroup {
			t.Errorf("endpoint %s: subject %s in %q, want %s in %q", ep.Name, ep.Subject, ep.QueueGroup, Subject(b.Prefix(), ep.Name), QueueGroup)
		}
	}

	stop()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := nc.RequestWithContext(ctx, "$SRV.PING."+ServiceName, nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("ping after Serve returned: got %v, want no responders", err)
	}
	_, err = NewClient(nc, b.Prefix(), time.Minute).Context(ctx, "github:o/r#1", 0)
	want := "no memory worker answering on " + Subject(b.Prefix(), "context") + ": is `relay memory` or `relay serve` running?"
	if !errors.Is(err, ErrNoWorker) || err.Error() != want {
		t.Errorf("without a worker: got %v, want %q", err, want)
	}
}
