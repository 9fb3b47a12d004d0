// Package remote serves a Memory over NATS request/reply and is the client an
// agent in another process uses. Requests and replies are JSON on
//
//	<prefix>.rpc.memory.context   {"thread", "budget"}          -> memory.SessionContext
//	<prefix>.rpc.memory.retrieve  memory.Query                  -> {"refs": [memory.Ref]}
//	<prefix>.rpc.memory.docs      {"query", "k"}                -> {"refs": [memory.Ref]}
//	<prefix>.rpc.memory.remember  memory.Note                   -> longterm.Memory
//	<prefix>.rpc.memory.forget    {"thread"}                    -> memory.Forgotten
//
// wrapped in a reply {"result": ..., "error": "...", "code": "..."}. The
// subjects sit under "rpc", outside every JetStream stream: a request on a
// subject a stream captures (memory.> is in the work stream) would be stored
// and answered by the stream's publish acknowledgement instead of the worker.
// Workers subscribe in the queue group "memory", so each request reaches one.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/longterm"
)

// Backend is what the server answers from; *memory.Memory implements it.
type Backend interface {
	Context(ctx context.Context, thread string, budget int) (memory.SessionContext, error)
	Retrieve(ctx context.Context, q memory.Query) ([]memory.Ref, error)
	RetrieveDocs(ctx context.Context, query string, k int) ([]memory.Ref, error)
	Remember(ctx context.Context, n memory.Note) (longterm.Memory, error)
	Forget(ctx context.Context, thread string) (memory.Forgotten, error)
}

// Subject returns the request subject of an operation under prefix.
func Subject(prefix, op string) string { return prefix + ".rpc.memory." + op }

// QueueGroup is the queue group memory workers share.
const QueueGroup = "memory"

// Reply codes.
const (
	CodeBadRequest  = "bad_request"
	CodeUnavailable = "unavailable"
)

type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Code   string          `json:"code,omitempty"`
}

type contextReq struct {
	Thread string `json:"thread"`
	Budget int    `json:"budget,omitempty"`
}

type docsReq struct {
	Query string `json:"query"`
	K     int    `json:"k,omitempty"`
}

type refsReply struct {
	Refs []memory.Ref `json:"refs"`
}

// ServerConfig configures Serve.
type ServerConfig struct {
	// Prefix is the bus prefix ("relay"). Required.
	Prefix string
	// Concurrency bounds requests handled at once. Default 8.
	Concurrency int
	// Timeout bounds one request. Default 10s.
	Timeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Serve answers memory requests on nc until ctx is cancelled, then drains its
// subscription and waits for in-flight requests.
func Serve(ctx context.Context, nc *nats.Conn, b Backend, cfg ServerConfig) error {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	hctx := context.WithoutCancel(ctx)
	sub, err := nc.QueueSubscribe(Subject(cfg.Prefix, "*"), QueueGroup, func(msg *nats.Msg) {
		if msg.Reply == "" {
			return
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rctx, cancel := context.WithTimeout(hctx, cfg.Timeout)
			defer cancel()
			op := msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
			res, err := handle(rctx, b, op, msg.Data)
			var rep reply
			if err != nil {
				rep.Error, rep.Code = err.Error(), CodeUnavailable
				var bad *badRequest
				if errors.As(err, &bad) || errors.Is(err, memory.ErrBadUpdate) || errors.Is(err, memory.ErrEmptyQuery) {
					rep.Code = CodeBadRequest
				} else {
					log.Warn("memory request failed", "op", op, "err", err)
				}
			} else if rep.Result, err = json.Marshal(res); err != nil {
				rep.Error, rep.Code = err.Error(), CodeUnavailable
			}
			data, _ := json.Marshal(rep)
			if err := msg.Respond(data); err != nil {
				log.Warn("memory reply not sent", "op", op, "err", err)
			}
		}()
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", Subject(cfg.Prefix, "*"), err)
	}
	<-ctx.Done()
	_ = sub.Drain()
	wg.Wait()
	return nil
}

type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return &badRequest{msg: "bad request: " + err.Error()}
	}
	return nil
}

func handle(ctx context.Context, b Backend, op string, data []byte) (any, error) {
	switch op {
	case "context":
		var r contextReq
		if err := decode(data, &r); err != nil {
			return nil, err
		}
		if r.Thread == "" {
			return nil, &badRequest{msg: "thread is required"}
		}
		return b.Context(ctx, r.Thread, r.Budget)
	case "retrieve":
		var q memory.Query
		if err := decode(data, &q); err != nil {
			return nil, err
		}
		refs, err := b.Retrieve(ctx, q)
		return refsReply{Refs: refs}, err
	case "docs":
		var r docsReq
		if err := decode(data, &r); err != nil {
			return nil, err
		}
		refs, err := b.RetrieveDocs(ctx, r.Query, r.K)
		return refsReply{Refs: refs}, err
	case "remember":
		var n memory.Note
		if err := decode(data, &n); err != nil {
			return nil, err
		}
		return b.Remember(ctx, n)
	case "forget":
		var r contextReq
		if err := decode(data, &r); err != nil {
			return nil, err
		}
		if r.Thread == "" {
			return nil, &badRequest{msg: "thread is required"}
		}
		return b.Forget(ctx, r.Thread)
	}
	return nil, &badRequest{msg: fmt.Sprintf("unknown operation %q", op)}
}

// ErrNoWorker is returned when no memory worker answers (none running).
var ErrNoWorker = errors.New("no memory worker answered (is `relay serve` or `relay memory` running?)")

// Error is an error reported by the worker.
type Error struct {
	Op, Code, Message string
}

func (e *Error) Error() string { return fmt.Sprintf("memory %s: %s", e.Op, e.Message) }

// Client asks a memory worker over NATS. It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
}

// NewClient returns a client for the workers of the bus with prefix; timeout
// bounds a request when ctx has no deadline (default 10s).
func NewClient(nc *nats.Conn, prefix string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Client{nc: nc, prefix: prefix, timeout: timeout}
}

func (c *Client) call(ctx context.Context, op string, req, res any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	msg, err := c.nc.RequestWithContext(ctx, Subject(c.prefix, op), data)
	if errors.Is(err, nats.ErrNoResponders) {
		return ErrNoWorker
	}
	if err != nil {
		return fmt.Errorf("memory %s: %w", op, err)
	}
	var rep reply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return fmt.Errorf("memory %s: bad reply: %w", op, err)
	}
	if rep.Error != "" {
		return &Error{Op: op, Code: rep.Code, Message: rep.Error}
	}
	if err := json.Unmarshal(rep.Result, res); err != nil {
		return fmt.Errorf("memory %s: bad result: %w", op, err)
	}
	return nil
}

// Context asks for a thread's session context.
func (c *Client) Context(ctx context.Context, thread string, budget int) (memory.SessionContext, error) {
	var sc memory.SessionContext
	err := c.call(ctx, "context", contextReq{Thread: thread, Budget: budget}, &sc)
	return sc, err
}

// Retrieve asks for long-term memories.
func (c *Client) Retrieve(ctx context.Context, q memory.Query) ([]memory.Ref, error) {
	var r refsReply
	err := c.call(ctx, "retrieve", q, &r)
	return r.Refs, err
}

// RetrieveDocs asks for document references.
func (c *Client) RetrieveDocs(ctx context.Context, query string, k int) ([]memory.Ref, error) {
	var r refsReply
	err := c.call(ctx, "docs", docsReq{Query: query, K: k}, &r)
	return r.Refs, err
}

// Remember stores a long-term note.
func (c *Client) Remember(ctx context.Context, n memory.Note) (longterm.Memory, error) {
	var m longterm.Memory
	err := c.call(ctx, "remember", n, &m)
	return m, err
}

// Forget removes a thread's memory.
func (c *Client) Forget(ctx context.Context, thread string) (memory.Forgotten, error) {
	var f memory.Forgotten
	err := c.call(ctx, "forget", contextReq{Thread: thread}, &f)
	return f, err
}

var _ Backend = (*memory.Memory)(nil)
var _ Backend = (*Client)(nil)
