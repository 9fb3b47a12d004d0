// Package remote serves a Memory over NATS request/reply and is the client an
// agent in another process uses. Requests and replies are JSON on
//
//	<prefix>.rpc.memory.context   {"thread", "budget"}          -> memory.SessionContext
//	<prefix>.rpc.memory.retrieve  memory.Query                  -> {"refs": [memory.Ref]}
//	<prefix>.rpc.memory.docs      {"query", "k"}                -> {"refs": [memory.Ref]}
//	<prefix>.rpc.memory.remember  memory.Note                   -> longterm.Memory
//	<prefix>.rpc.memory.forget    {"thread"}                    -> memory.Forgotten
//
// wrapped in a reply {"result": ..., "error": "...", "code": "..."}; a failed
// request also carries micro's Nats-Service-Error(-Code) headers (400 for
// CodeBadRequest, 503 for CodeUnavailable). The subjects sit under "rpc",
// outside every JetStream stream: a request on a subject a stream captures
// (memory.> is in the work stream) would be stored and answered by the
// stream's publish acknowledgement instead of the worker.
//
// The worker is the nats.go/micro service "relay-memory". Workers subscribe
// in the queue group "memory" (the one workers before micro used), so each
// request reaches one of them, old or new, during a rolling restart.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/internal/rpc"
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

// Reply codes, in the reply body.
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

// ServiceName is the memory worker's nats.go/micro service name, the one
// `$SRV.PING|INFO|STATS.relay-memory` discover.
const ServiceName = "relay-memory"

// Ops are the operations the worker answers, one micro endpoint each.
var Ops = []string{"context", "retrieve", "docs", "remember", "forget"}

// ServerConfig configures Serve.
type ServerConfig struct {
	// Prefix is the bus prefix ("relay"). Required.
	Prefix string
	// Timeout bounds one request. Default 10s.
	Timeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Serve answers memory requests on nc as the micro service ServiceName (one
// endpoint per operation, queue group QueueGroup) until ctx is cancelled,
// then stops the service and waits for the requests being handled. Each
// endpoint answers one request at a time per worker; requests for different
// operations, and every worker instance, run in parallel.
func Serve(ctx context.Context, nc *nats.Conn, b Backend, cfg ServerConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	eps := make([]rpc.Endpoint, 0, len(Ops))
	for _, op := range Ops {
		eps = append(eps, rpc.Endpoint{Name: op, Subject: Subject(cfg.Prefix, op), ErrorBody: errorReply,
			Handle: func(ctx context.Context, data []byte) (any, error) {
				res, err := handle(ctx, b, op, data)
				if err != nil {
					rep, e := failure(err)
					if rep.Code != CodeBadRequest {
						log.Warn("memory request failed", "op", op, "err", err)
					}
					return rep, e
				}
				raw, err := json.Marshal(res)
				if err != nil {
					e := rpc.Errorf(rpc.CodeInternal, "%v", err)
					return reply{Error: e.Message, Code: CodeUnavailable}, e
				}
				return reply{Result: raw}, nil
			}})
	}
	srv, err := rpc.Start(ctx, nc, rpc.Config{
		Name:        ServiceName,
		Description: "relay memory worker: session context, long-term retrieval, documents, remember, forget",
		Prefix:      cfg.Prefix,
		QueueGroup:  QueueGroup,
		Timeout:     cfg.Timeout,
		Logger:      log,
	}, eps...)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return srv.Stop()
}

// failure is the reply body (the shape clients before micro decode) and the
// micro error of a failed request.
func failure(err error) (reply, *rpc.Error) {
	var bad *badRequest
	if errors.As(err, &bad) || errors.Is(err, memory.ErrBadUpdate) || errors.Is(err, memory.ErrEmptyQuery) {
		return reply{Error: err.Error(), Code: CodeBadRequest}, &rpc.Error{Code: rpc.CodeBadRequest, Message: err.Error()}
	}
	return reply{Error: err.Error(), Code: CodeUnavailable}, &rpc.Error{Code: rpc.CodeUnavailable, Message: err.Error()}
}

// errorReply is the body of an error the service raises itself.
func errorReply(e *rpc.Error) any {
	code := CodeUnavailable
	if e.Code == rpc.CodeBadRequest {
		code = CodeBadRequest
	}
	return reply{Error: e.Message, Code: code}
}

type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return &badRequest{msg: "bad request: " + err.Error()}
	}
	return nil
}

// decodeThread decodes a request about one thread, which it must name.
func decodeThread(data []byte) (contextReq, error) {
	var r contextReq
	if err := decode(data, &r); err != nil {
		return r, err
	}
	if r.Thread == "" {
		return r, &badRequest{msg: "thread is required"}
	}
	return r, nil
}

func handle(ctx context.Context, b Backend, op string, data []byte) (any, error) {
	switch op {
	case "context":
		r, err := decodeThread(data)
		if err != nil {
			return nil, err
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
		r, err := decodeThread(data)
		if err != nil {
			return nil, err
		}
		return b.Forget(ctx, r.Thread)
	}
	return nil, &badRequest{msg: fmt.Sprintf("unknown operation %q", op)}
}

// ErrNoWorker matches (errors.Is) the error of a request no memory worker
// subscribes to; its message names the subject and the command to start.
var ErrNoWorker = errors.New("no memory worker answering")

var workerTarget = rpc.Target{Service: "memory worker", Start: "`relay memory` or `relay serve`", Err: ErrNoWorker}

// Error is an error reported by the worker, whether it sent it in micro's
// error headers or, before micro, only in the reply body.
type Error struct {
	// Op is the operation ("context").
	Op string
	// Code is CodeBadRequest or CodeUnavailable.
	Code string
	// Message is the worker's description.
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("memory %s: %s", e.Op, e.Message) }

// Client asks a memory worker over NATS. It understands workers on micro and
// the ones before (see package internal/rpc). It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
}

// NewClient returns a client for the workers of the bus with prefix; timeout
// bounds each request, or ctx's deadline when that is earlier (default 10s).
func NewClient(nc *nats.Conn, prefix string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Client{nc: nc, prefix: prefix, timeout: timeout}
}

func (c *Client) call(ctx context.Context, op string, req, res any) error {
	body, err := rpc.Call(ctx, c.nc, Subject(c.prefix, op), req, c.timeout, workerTarget)
	var re *rpc.Error
	if errors.As(err, &re) {
		code := CodeUnavailable
		if re.Code == rpc.CodeBadRequest {
			code = CodeBadRequest
		}
		return &Error{Op: op, Code: code, Message: re.Message}
	}
	var none *rpc.NoRespondersError
	if errors.As(err, &none) {
		return err // it names the subject already
	}
	if err != nil {
		return fmt.Errorf("memory %s: %w", op, err)
	}
	var rep reply
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("memory %s: bad reply: %w", op, err)
	}
	if rep.Error != "" { // a worker before micro: the error is only in the body
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
