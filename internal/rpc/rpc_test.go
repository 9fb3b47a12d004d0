package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
)

type body struct {
	Echo  string `json:"echo,omitempty"`
	Error string `json:"error,omitempty"`
}

func errBody(e *Error) any { return body{Error: e.Message} }

var target = Target{Service: "echo worker", Start: "`relay echo`", Err: errors.New("no echo worker answering")}

// echoEndpoint answers {"echo": <request>} and fails requests starting
// with "bad" (400) or "down" (503).
func echoEndpoint(subject string, handled *atomic.Int32) Endpoint {
	return Endpoint{Name: "echo", Subject: subject, ErrorBody: errBody, Handle: func(_ context.Context, data []byte) (any, error) {
		if handled != nil {
			handled.Add(1)
		}
		var in string
		if err := json.Unmarshal(data, &in); err != nil {
			return nil, Errorf(CodeBadRequest, "bad request: %v", err)
		}
		switch {
		case strings.HasPrefix(in, "bad"):
			e := Errorf(CodeBadRequest, "cannot echo %q", in)
			return body{Error: e.Message}, e
		case strings.HasPrefix(in, "down"):
			return nil, fmt.Errorf("store down:\nconnection refused")
		}
		return body{Echo: in}, nil
	}}
}

func start(t *testing.T, nc *nats.Conn, prefix string, eps ...Endpoint) *Server {
	t.Helper()
	s, err := Start(t.Context(), nc, Config{Name: "relay-echo", Description: "test", Prefix: prefix, QueueGroup: "echo"}, eps...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// echoServer starts an echo endpoint on an embedded bus and returns the
// bus, the endpoint's subject and a client connection of its own.
func echoServer(t *testing.T) (*bus.Bus, string, *nats.Conn) {
	t.Helper()
	b := bustest.Embedded(t)
	subj := b.Subject("rpc.echo")
	start(t, b.Conn(), b.Prefix(), echoEndpoint(subj, nil))
	return b, subj, bustest.Connect(t, b).Conn()
}

func TestCallAndErrorHeaders(t *testing.T) {
	t.Parallel()
	_, subj, client := echoServer(t)

	for _, tt := range []struct {
		name, in        string
		wantEcho        string
		wantCode        string
		wantBodyErr     bool
		wantDescription string
	}{
		{name: "ok", in: "hello", wantEcho: "hello"},
		{name: "error with body", in: "bad one", wantCode: CodeBadRequest, wantBodyErr: true, wantDescription: `cannot echo "bad one"`},
		{name: "plain error", in: "down", wantCode: CodeInternal, wantBodyErr: true, wantDescription: "store down: connection refused"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The raw reply: the old body, and micro's headers on errors.
			data, _ := json.Marshal(tt.in)
			msg, err := client.Request(subj, data, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var got body
			if err := json.Unmarshal(msg.Data, &got); err != nil {
				t.Fatalf("body %q: %v", msg.Data, err)
			}
			if got.Echo != tt.wantEcho || (got.Error != "") != tt.wantBodyErr {
				t.Errorf("body: got %+v, want echo %q and an error %v", got, tt.wantEcho, tt.wantBodyErr)
			}
			if c, d := msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader); c != tt.wantCode || d != tt.wantDescription {
				t.Errorf("headers: got code %q description %q, want %q %q", c, d, tt.wantCode, tt.wantDescription)
			}
			// Call: the body, and the headers as an *Error.
			raw, err := Call(t.Context(), client, subj, tt.in, 10*time.Second, target)
			var e *Error
			switch {
			case tt.wantCode == "" && err != nil:
				t.Errorf("Call: got %v, want no error", err)
			case tt.wantCode != "" && (!errors.As(err, &e) || e.Code != tt.wantCode || e.Message != tt.wantDescription):
				t.Errorf("Call: got %v, want an *Error %s %q", err, tt.wantCode, tt.wantDescription)
			case string(raw) != string(msg.Data):
				t.Errorf("Call body: got %s, want %s", raw, msg.Data)
			}
		})
	}
}

func TestCallNoResponders(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	subj := b.Subject("rpc.echo")
	// A deadline far away: the error must come from "no responders", not
	// from waiting.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := Call(ctx, b.Conn(), subj, "hello", 0, target)
	want := "no echo worker answering on " + subj + ": is `relay echo` running?"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if !errors.Is(err, target.Err) || !errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v: want it to match the target's sentinel and nats.ErrNoResponders, not a deadline", err)
	}
}

func TestCallTimeout(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	subj := b.Subject("rpc.slow")
	release := make(chan struct{})
	start(t, b.Conn(), b.Prefix(), Endpoint{Name: "slow", Subject: subj, ErrorBody: errBody,
		Handle: func(ctx context.Context, _ []byte) (any, error) {
			<-release
			return body{}, nil
		}})
	defer close(release)
	// The caller's deadline is far later: the call's own timeout ends it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := Call(ctx, bustest.Connect(t, b).Conn(), subj, "x", 50*time.Millisecond, target)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, target.Err) || !strings.Contains(err.Error(), "no reply from the echo worker in time") {
		t.Fatalf("got %v, want a timeout that is not a no-responders error", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the call waited for the caller's deadline, not its own timeout")
	}
}

func TestDiscoveryAndStats(t *testing.T) {
	t.Parallel()
	b, subj, client := echoServer(t)

	ping := bustest.Request[micro.Ping](t, client, "$SRV.PING.relay-echo")
	if ping.Name != "relay-echo" || ping.ID == "" || ping.Version != Version() || ping.Metadata[MetadataPrefix] != b.Prefix() {
		t.Errorf("ping: got %+v", ping)
	}
	info := bustest.Request[micro.Info](t, client, "$SRV.INFO.relay-echo."+ping.ID)
	if len(info.Endpoints) != 1 || info.Endpoints[0].Subject != subj || info.Endpoints[0].QueueGroup != "echo" || info.Description != "test" {
		t.Errorf("info: got %+v, want one endpoint on %s in queue group echo", info, subj)
	}
	for _, in := range []string{"a", "b", "bad"} {
		_, err := Call(t.Context(), client, subj, in, 10*time.Second, target)
		if (err != nil) != (in == "bad") {
			t.Fatalf("call %q: got error %v", in, err)
		}
	}
	// micro counts a request after its handler has sent the reply, so the
	// last call's count may land after Call returned: wait for the three.
	var ep micro.EndpointStats
	testenv.Poll(t, 10*time.Second, func() (bool, string) {
		stats := bustest.Request[micro.Stats](t, client, "$SRV.STATS.relay-echo")
		if len(stats.Endpoints) != 1 {
			t.Fatalf("stats: got %+v", stats)
		}
		ep = *stats.Endpoints[0]
		return ep.NumRequests >= 3, fmt.Sprintf("stats: %d requests counted, want 3", ep.NumRequests)
	})
	if ep.NumRequests != 3 || ep.NumErrors != 1 || !strings.Contains(ep.LastError, "cannot echo") {
		t.Errorf("stats: got %d requests, %d errors, last %q; want 3, 1 and the bad request", ep.NumRequests, ep.NumErrors, ep.LastError)
	}
}

// TestInstancesCompete runs two servers and a responder written the way
// relays before micro answered (a plain queue subscription): each request
// is handled exactly once.
func TestInstancesCompete(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	subj := b.Subject("rpc.echo")
	var handled atomic.Int32
	start(t, b.Conn(), b.Prefix(), echoEndpoint(subj, &handled))
	start(t, bustest.Connect(t, b).Conn(), b.Prefix(), echoEndpoint(subj, &handled))
	old := bustest.Connect(t, b).Conn()
	sub, err := old.QueueSubscribe(subj, "echo", func(m *nats.Msg) {
		handled.Add(1)
		_ = m.Respond([]byte(`{"echo":"old"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := old.Flush(); err != nil {
		t.Fatal(err)
	}
	client := bustest.Connect(t, b).Conn()
	const n = 60
	for i := range n {
		if _, err := Call(t.Context(), client, subj, fmt.Sprint(i), 10*time.Second, target); err != nil {
			t.Fatal(err)
		}
	}
	if got := handled.Load(); got != n {
		t.Errorf("handled %d times, want %d (once per request)", got, n)
	}
}

func TestStopDrainsAndLeaves(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	subj := b.Subject("rpc.slow")
	started, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	s, err := Start(t.Context(), b.Conn(), Config{Name: "relay-slow", Prefix: b.Prefix(), QueueGroup: "slow"},
		Endpoint{Name: "slow", Subject: subj, ErrorBody: errBody, Handle: func(ctx context.Context, _ []byte) (any, error) {
			close(started)
			<-release
			close(finished)
			return body{Echo: "done"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	client := bustest.Connect(t, b).Conn()
	replied := make(chan error, 1)
	go func() {
		raw, err := Call(context.Background(), client, subj, "x", 20*time.Second, target)
		if err == nil && !strings.Contains(string(raw), "done") {
			err = fmt.Errorf("reply %s", raw)
		}
		replied <- err
	}()
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop() }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a request was being handled", err)
	case <-time.After(100 * time.Millisecond): // a window for a wrong early return, not a wait
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	select {
	case <-finished:
	default:
		t.Fatal("Stop returned before the handler finished")
	}
	if err := <-replied; err != nil {
		t.Fatalf("request in flight at Stop: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := Call(ctx, client, subj, "x", 0, target); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("request after Stop: got %v, want no responders", err)
	}
	if _, err := client.RequestWithContext(ctx, "$SRV.PING.relay-slow", nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("ping after Stop: got %v, want no responders", err)
	}
}

// fakeRequest records what a handler answers.
type fakeRequest struct {
	data    []byte
	body    []byte
	code    string
	message string
	noReply bool // a notification: no reply subject
}

func (r *fakeRequest) Respond(b []byte, _ ...micro.RespondOpt) error { r.body = b; return nil }
func (r *fakeRequest) RespondJSON(v any, _ ...micro.RespondOpt) error {
	r.body, _ = json.Marshal(v)
	return nil
}
func (r *fakeRequest) Error(code, description string, data []byte, _ ...micro.RespondOpt) error {
	r.code, r.message, r.body = code, description, data
	return nil
}
func (r *fakeRequest) Data() []byte           { return r.data }
func (r *fakeRequest) Headers() micro.Headers { return nil }
func (r *fakeRequest) Subject() string        { return "x" }
func (r *fakeRequest) Reply() string {
	if r.noReply {
		return ""
	}
	return "_INBOX.x"
}

func TestHandlerReplies(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{Name: "relay-x", Timeout: time.Second}, ctx: context.Background(), log: nopLog()}
	var handled atomic.Int32
	ep := Endpoint{Name: "x", ErrorBody: errBody, Handle: func(_ context.Context, data []byte) (any, error) {
		handled.Add(1)
		if string(data) == "chan" {
			return make(chan int), nil // does not marshal
		}
		return body{Echo: string(data)}, nil
	}}
	h := s.handler(ep)
	for _, tt := range []struct {
		name, in, wantCode, wantBody string
		stopped, noReply             bool
	}{
		{name: "ok", in: "hi", wantBody: `{"echo":"hi"}`},
		{name: "reply does not marshal", in: "chan", wantCode: CodeInternal, wantBody: `{"error":"reply does not marshal: json: unsupported type: chan int"}`},
		{name: "stopping", in: "hi", stopped: true, wantCode: CodeUnavailable, wantBody: `{"error":"relay-x is stopping"}`},
		// A notification is handled and not answered.
		{name: "notification", in: "hi", noReply: true},
	} {
		s.stopped = tt.stopped
		r := &fakeRequest{data: []byte(tt.in), noReply: tt.noReply}
		before := handled.Load()
		h.Handle(r)
		if !tt.stopped && handled.Load() != before+1 {
			t.Errorf("%s: the endpoint did not run", tt.name)
		}
		if r.code != tt.wantCode || string(r.body) != tt.wantBody {
			t.Errorf("%s: got code %q body %s, want %q %s", tt.name, r.code, r.body, tt.wantCode, tt.wantBody)
		}
	}
}

func nopLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
