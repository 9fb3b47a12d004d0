package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The wire of task requests (tasks.go).
//
// The SDK (go-sdk v1.8.0) has no tasks: it cannot add the "task" parameter
// to a tools/call, send tasks/get, tasks/result or tasks/cancel, and its
// mcp.Tool drops a tool's "execution". The runner therefore speaks those
// requests itself, beside the SDK's session:
//
//   - stdio: the connection the transport returns is wrapped (sideConn); the
//     runner writes its own requests with ids the SDK never uses
//     ("relay-task-N", the SDK's are numbers) and takes their responses out
//     of Read before the SDK sees them. Server requests during a task (an
//     elicitation delivered through tasks/result) reach the SDK as any other
//     and are answered by its handlers.
//   - streamable HTTP: the runner POSTs its requests to the endpoint with the
//     session's Mcp-Session-Id (httpWire), so a task created on a session is
//     polled on that session also by a runner that started later; a session
//     holding tasks is not DELETEd when the runner closes it (taskHTTP), so
//     the server keeps its tasks for the next runner.
//
// Both peek at the raw tools/list responses to learn each tool's
// execution.taskSupport.

// taskIDPrefix starts the ids of the runner's own requests.
const taskIDPrefix = "relay-task-"

var wireSeq atomic.Uint64

func nextWireID() jsonrpc.ID {
	id, _ := jsonrpc.MakeID(taskIDPrefix + strconv.FormatUint(wireSeq.Add(1), 10))
	return id
}

// serverRequest answers a request the server sends during a task request
// (an elicitation delivered through tasks/result on HTTP).
type serverRequest func(ctx context.Context, method string, params json.RawMessage) (any, error)

// wire sends one JSON-RPC request of the runner's own and returns its result.
type wire interface {
	call(ctx context.Context, method string, params any, onRequest serverRequest) (json.RawMessage, error)
}

// rpcError is a JSON-RPC error a server answered a task request with.
type rpcError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// toolModes records the execution.taskSupport of each tool of a server, as
// peeked from its raw tools/list responses.
type toolModes struct {
	mu sync.Mutex
	m  map[string]map[string]string // server -> tool -> taskSupport
}

func (t *toolModes) get(server, tool string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[server][tool]
}

// note takes a tools/list result.
func (t *toolModes) note(server string, result json.RawMessage) {
	var res struct {
		Tools []struct {
			Name      string `json:"name"`
			Execution *struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
		} `json:"tools"`
	}
	if json.Unmarshal(result, &res) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]map[string]string{}
	}
	if t.m[server] == nil {
		t.m[server] = map[string]string{}
	}
	for _, tl := range res.Tools {
		mode := ""
		if tl.Execution != nil {
			mode = tl.Execution.TaskSupport
		}
		t.m[server][tl.Name] = mode
	}
}

// sideConn wraps a stdio session's connection: the runner's own requests
// go out on it and their responses are taken out of Read; tools/list
// responses are peeked at; notifications/tasks/status are handed to the
// task that waits (status).
type sideConn struct {
	mcp.Connection
	server string
	modes  *toolModes

	mu     sync.Mutex
	waits  map[string]chan *jsonrpc.Response
	lists  map[any]bool
	closed bool
	err    error
}

func newSideConn(c mcp.Connection, server string, modes *toolModes) *sideConn {
	return &sideConn{Connection: c, server: server, modes: modes, waits: map[string]chan *jsonrpc.Response{}, lists: map[any]bool{}}
}

func (s *sideConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/list" && req.IsCall() {
		s.mu.Lock()
		s.lists[req.ID.Raw()] = true
		s.mu.Unlock()
	}
	return s.Connection.Write(ctx, msg)
}

func (s *sideConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := s.Connection.Read(ctx)
		if err != nil {
			s.fail(err)
			return nil, err
		}
		switch m := msg.(type) {
		case *jsonrpc.Response:
			if id, ok := m.ID.Raw().(string); ok && strings.HasPrefix(id, taskIDPrefix) {
				s.mu.Lock()
				ch := s.waits[id]
				delete(s.waits, id)
				s.mu.Unlock()
				if ch != nil {
					ch <- m
				}
				continue
			}
			s.mu.Lock()
			list := s.lists[m.ID.Raw()]
			delete(s.lists, m.ID.Raw())
			s.mu.Unlock()
			if list && m.Error == nil {
				s.modes.note(s.server, m.Result)
			}
		case *jsonrpc.Request:
			if m.Method == "notifications/tasks/status" {
				continue // the runner polls tasks/get; the SDK knows no such notification
			}
		}
		return msg, nil
	}
}

func (s *sideConn) Close() error {
	s.fail(mcp.ErrConnectionClosed)
	return s.Connection.Close()
}

func (s *sideConn) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed, s.err = true, err
	for id, ch := range s.waits {
		close(ch)
		delete(s.waits, id)
	}
}

// call implements wire. Server requests during the call reach the SDK's
// handlers, not onRequest.
func (s *sideConn) call(ctx context.Context, method string, params any, _ serverRequest) (json.RawMessage, error) {
	id := nextWireID()
	req, err := jsonrpc2Call(id, method, params)
	if err != nil {
		return nil, err
	}
	ch := make(chan *jsonrpc.Response, 1)
	key := id.Raw().(string)
	s.mu.Lock()
	if s.closed {
		err := s.err
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", mcp.ErrConnectionClosed, err)
	}
	s.waits[key] = ch
	s.mu.Unlock()
	if err := s.Connection.Write(ctx, req); err != nil {
		s.mu.Lock()
		delete(s.waits, key)
		s.mu.Unlock()
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: %w", method, mcp.ErrConnectionClosed)
		}
		return responseResult(resp)
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.waits, key)
		s.mu.Unlock()
		return nil, context.Cause(ctx)
	}
}

func jsonrpc2Call(id jsonrpc.ID, method string, params any) (*jsonrpc.Request, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("%s params: %w", method, err)
	}
	return &jsonrpc.Request{ID: id, Method: method, Params: p}, nil
}

func responseResult(resp *jsonrpc.Response) (json.RawMessage, error) {
	if resp.Error != nil {
		var we *jsonrpc.Error
		if errors.As(resp.Error, &we) {
			return nil, &rpcError{Code: we.Code, Message: we.Message}
		}
		return nil, resp.Error
	}
	return resp.Result, nil
}

// httpWire sends the runner's requests to a streamable HTTP server on one
// session. Server requests in the response stream go to onRequest, and
// their answers are POSTed back.
type httpWire struct {
	client   *http.Client
	endpoint string
	session  string
	version  string
}

func (w *httpWire) post(ctx context.Context, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if w.session != "" {
		req.Header.Set("Mcp-Session-Id", w.session)
	}
	if w.version != "" {
		req.Header.Set("Mcp-Protocol-Version", w.version)
	}
	return w.client.Do(req)
}

// call implements wire.
func (w *httpWire) call(ctx context.Context, method string, params any, onRequest serverRequest) (json.RawMessage, error) {
	id := nextWireID()
	req, err := jsonrpc2Call(id, method, params)
	if err != nil {
		return nil, err
	}
	body, err := jsonrpc.EncodeMessage(req)
	if err != nil {
		return nil, err
	}
	resp, err := w.post(ctx, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%s: %w (the server no longer knows session %s)", method, ErrTaskGone, w.session)
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: HTTP %s: %s", method, resp.Status, strings.TrimSpace(string(b)))
	}
	var result json.RawMessage
	var rerr error
	found := false
	handle := func(data []byte) bool {
		msg, err := jsonrpc.DecodeMessage(data)
		if err != nil {
			return false
		}
		switch m := msg.(type) {
		case *jsonrpc.Response:
			if m.ID == id {
				result, rerr = responseResult(m)
				found = true
				return true
			}
		case *jsonrpc.Request:
			if m.IsCall() {
				w.answer(ctx, m, onRequest)
			}
		}
		return false
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		readEvents(resp.Body, handle)
	} else {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		handle(b)
	}
	if !found {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("%s: %w (the response ended without an answer)", method, mcp.ErrConnectionClosed)
	}
	return result, rerr
}

// answer runs a server request of the response stream and POSTs its
// response.
func (w *httpWire) answer(ctx context.Context, m *jsonrpc.Request, onRequest serverRequest) {
	var res any
	err := &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "the relay does not answer " + m.Method + " during a task"}
	var out *jsonrpc.Response
	if onRequest != nil {
		var herr error
		res, herr = onRequest(ctx, m.Method, m.Params)
		if herr == nil {
			b, merr := json.Marshal(res)
			if merr != nil {
				herr = merr
			} else {
				out = &jsonrpc.Response{ID: m.ID, Result: b}
			}
		}
		if herr != nil {
			var we *jsonrpc.Error
			if !errors.As(herr, &we) {
				we = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: herr.Error()}
			}
			out = &jsonrpc.Response{ID: m.ID, Error: we}
		}
	}
	if out == nil {
		out = &jsonrpc.Response{ID: m.ID, Error: err}
	}
	b, merr := jsonrpc.EncodeMessage(out)
	if merr != nil {
		return
	}
	if resp, perr := w.post(ctx, b); perr == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
	}
}

// readEvents reads a server-sent event stream, handing each event's data to
// fn until fn returns true or the stream ends.
func readEvents(r io.Reader, fn func([]byte) bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64<<20)
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 {
				if fn(data.Bytes()) {
					return
				}
				data.Reset()
			}
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if data.Len() > 0 {
		fn(data.Bytes())
	}
}

// taskHTTP is the HTTP client layer of a streamable HTTP server's session:
// it leaves out the DELETE of a session that holds tasks (the next runner
// polls them on it) and peeks at tools/list responses.
type taskHTTP struct {
	base   http.RoundTripper
	server string
	r      *Runner
}

func (t *taskHTTP) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodDelete && t.r.holdsSession(req.Header.Get("Mcp-Session-Id")) {
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	}
	if req.Method != http.MethodPost || req.Body == nil {
		return t.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	resp, err := t.base.RoundTrip(req)
	if err != nil || !bytes.Contains(body, []byte(`"method":"tools/list"`)) || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	msg, derr := jsonrpc.DecodeMessage(body)
	call, ok := msg.(*jsonrpc.Request)
	if derr != nil || !ok {
		return resp, err
	}
	resp.Body = &peekBody{ReadCloser: resp.Body, sse: strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"),
		done: func(b []byte, sse bool) { t.peek(call.ID, b, sse) }}
	return resp, nil
}

func (t *taskHTTP) peek(id jsonrpc.ID, b []byte, sse bool) {
	take := func(data []byte) bool {
		msg, err := jsonrpc.DecodeMessage(data)
		if resp, ok := msg.(*jsonrpc.Response); err == nil && ok && resp.ID == id && resp.Error == nil {
			t.r.modes.note(t.server, resp.Result)
			return true
		}
		return false
	}
	if sse {
		readEvents(bytes.NewReader(b), take)
		return
	}
	take(b)
}

// peekBody keeps a copy of what the SDK reads of a response body (bounded)
// and hands it to done at its end.
type peekBody struct {
	io.ReadCloser
	sse  bool
	buf  bytes.Buffer
	once sync.Once
	done func([]byte, bool)
}

const peekLimit = 16 << 20

func (p *peekBody) Read(b []byte) (int, error) {
	n, err := p.ReadCloser.Read(b)
	if p.buf.Len()+n <= peekLimit {
		p.buf.Write(b[:n])
	}
	if err != nil {
		p.finish()
	}
	return n, err
}

func (p *peekBody) Close() error {
	p.finish()
	return p.ReadCloser.Close()
}

func (p *peekBody) finish() { p.once.Do(func() { p.done(p.buf.Bytes(), p.sse) }) }

// sideSlot receives the sideConn a stdio dial made (the last one: a
// negotiation may start the server twice).
type sideSlot struct {
	mu   sync.Mutex
	side *sideConn
}

type sideKey struct{}

func withSideSlot(ctx context.Context) (context.Context, *sideSlot) {
	s := &sideSlot{}
	return context.WithValue(ctx, sideKey{}, s), s
}

func (s *sideSlot) set(c *sideConn) {
	s.mu.Lock()
	s.side = c
	s.mu.Unlock()
}

func (s *sideSlot) get() *sideConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.side
}

// taskClient is client with the taskHTTP layer for server.
func (r *Runner) taskClient(client *http.Client, server string) *http.Client {
	return wrapClient(client, func(rt http.RoundTripper) http.RoundTripper { return &taskHTTP{base: rt, server: server, r: r} })
}
