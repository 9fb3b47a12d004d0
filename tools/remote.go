package tools

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Request/reply subjects the runner answers, relative to the bus prefix.
// They are plain NATS (not JetStream) and deliberately outside the relay's
// streams: a stream capturing "tool.>" would answer a request with its
// publish acknowledgement.
const (
	// SubjectList answers ListRequest with ListResponse: the tools a role may call.
	SubjectList = "rpc.tool.list"
	// SubjectStatus answers with StatusResponse: every server's status.
	SubjectStatus = "rpc.tool.status"
	// SubjectRefresh answers RefreshRequest with RefreshResponse: drop the
	// cached tool lists. Every runner instance handles it (no queue group);
	// the client gets the first reply.
	SubjectRefresh = "rpc.tool.refresh"
	// SubjectActive answers with ActiveResponse: the executions running in
	// every runner on the bus (read from the shared LimitStore).
	SubjectActive = "rpc.tool.active"
	// SubjectCancel answers CancelRequest with CancelResponse. The runner
	// that gets it cancels the execution when it owns it, else forwards the
	// request to the owner on SubjectCancel + "." + the owner's id.
	SubjectCancel = "rpc.tool.cancel"
	// QueueGroup makes one runner process answer each request. Runners before
	// nats.go/micro used the same group, so during a rolling restart an old
	// and a new runner compete for a request rather than both answering it.
	QueueGroup = "toolrunner"
	// ServiceName is the runner's nats.go/micro service name, the one
	// `$SRV.PING|INFO|STATS.relay-toolrunner` discover.
	ServiceName = "relay-toolrunner"
)

// ListRequest asks for the tools of a role, at a place when At is set (a
// binding there limits the servers; runners before bindings ignore it).
type ListRequest struct {
	Role string              `json:"role"`
	At   *mcpconfig.Location `json:"at,omitempty"`
}

// ListResponse answers ListRequest. Error is set (and the reply also carries
// micro's error headers) when the request could not be answered.
type ListResponse struct {
	Tools []ToolInfo `json:"tools"`
	Error string     `json:"error,omitempty"`
}

// StatusResponse answers a status request. Error is set only when the runner
// could not answer (it is stopping); runners before micro never set it.
type StatusResponse struct {
	Servers []ServerStatus `json:"servers"`
	Stopped bool           `json:"stopped"`
	Error   string         `json:"error,omitempty"`
	// Pending are the enabled servers whose first connect attempt has not
	// finished (until it is empty a tool list may be partial); ConfigPath is
	// the mcp.json the runner read. Runners before these fields send neither.
	Pending    []string `json:"pending,omitempty"`
	ConfigPath string   `json:"config_path,omitempty"`
	// Invalid are the entries of the file that did not validate.
	Invalid []InvalidEntry `json:"invalid,omitempty"`
}

// RefreshRequest names the server whose tool list to drop; "" means all.
type RefreshRequest struct {
	Server string `json:"server,omitempty"`
}

// RefreshResponse answers RefreshRequest: the servers whose cached tool list
// the answering runner dropped. Error is set (with micro's error headers)
// when the server is unknown.
type RefreshResponse struct {
	Servers []string `json:"servers"`
	Error   string   `json:"error,omitempty"`
}

// ActiveResponse answers an active request. Error is set (with micro's
// error headers) when the shared state could not be read.
type ActiveResponse struct {
	Executions []Execution `json:"executions"`
	Error      string      `json:"error,omitempty"`
}

// CancelRequest asks to cancel the execution ID; Actor is who asks (the
// audit record's cancelled_by).
type CancelRequest struct {
	ID    string `json:"id"`
	Actor string `json:"actor"`
}

// CancelResponse answers CancelRequest. Error says why nothing was
// cancelled (no such active execution, its runner does not answer).
type CancelResponse struct {
	Cancelled bool   `json:"cancelled"`
	Error     string `json:"error,omitempty"`
}

// Requester sends a NATS request; *nats.Conn is one.
type Requester interface {
	RequestWithContext(ctx context.Context, subj string, data []byte) (*nats.Msg, error)
}

// ErrNoRunner matches (errors.Is) the error of a request no tool runner
// subscribes to; its message names the subject and the command to start.
var ErrNoRunner = errors.New("no tool runner answering")

// runnerTarget names the tool runner in client errors.
var runnerTarget = rpc.Target{Service: "tool runner", Start: "`relay toolrunner` or `relay serve`", Err: ErrNoRunner}

// remoteTimeout bounds each request to the tool runners (ctx's deadline
// when earlier).
const remoteTimeout = 5 * time.Second

// ListRemote asks a running tool runner for the tools role may call.
// prefix is the bus prefix ("relay"). Without a deadline on ctx it waits 5s.
// It understands runners on micro and the ones before (see package
// internal/rpc); an error a runner answered with is an *rpc.Error either way.
func ListRemote(ctx context.Context, nc Requester, prefix, role string) ([]ToolInfo, error) {
	return ListRemoteAt(ctx, nc, prefix, role, mcpconfig.Location{})
}

// ListRemoteAt is ListRemote at a place (Runner.ToolsAt); a zero Location
// is ListRemote.
func ListRemoteAt(ctx context.Context, nc Requester, prefix, role string, at mcpconfig.Location) ([]ToolInfo, error) {
	req := ListRequest{Role: role}
	if !at.IsZero() {
		req.At = &at
	}
	var resp ListResponse
	if err := request(ctx, nc, prefix+"."+SubjectList, req, &resp); err != nil {
		return nil, err
	}
	if resp.Error != "" { // a runner before micro: the error is only in the body
		return nil, &rpc.Error{Code: rpc.CodeBadRequest, Message: resp.Error}
	}
	return resp.Tools, nil
}

// StatusRemote asks a running tool runner for its servers' status.
func StatusRemote(ctx context.Context, nc Requester, prefix string) (*StatusResponse, error) {
	var resp StatusResponse
	if err := request(ctx, nc, prefix+"."+SubjectStatus, struct{}{}, &resp); err != nil {
		return nil, err
	}
	if resp.Error != "" {
		return nil, &rpc.Error{Code: rpc.CodeUnavailable, Message: resp.Error}
	}
	return &resp, nil
}

// RefreshRemote asks the running tool runners to drop their cached tool list
// of server ("" for every server): each fetches it again on next use. The
// request reaches every runner instance; the answer is the first one's. An
// unknown server is an *rpc.Error; no runner is ErrNoRunner, at once.
//
// Hooks workers and the agent listen on SubjectRefresh without answering, so
// a refresh request alone never meets NATS's "no responders" and would wait
// out its timeout when no runner is up: RefreshRemote first asks
// SubjectStatus, which only runners answer. The listeners stay on
// SubjectRefresh, where runners (old ones too) announce a reload.
func RefreshRemote(ctx context.Context, nc Requester, prefix, server string) ([]string, error) {
	var st StatusResponse
	var re *rpc.Error
	if err := request(ctx, nc, prefix+"."+SubjectStatus, struct{}{}, &st); err != nil && !errors.As(err, &re) {
		return nil, err
	}
	var resp RefreshResponse
	if err := request(ctx, nc, prefix+"."+SubjectRefresh, RefreshRequest{Server: server}, &resp); err != nil {
		return nil, err
	}
	if resp.Error != "" {
		return nil, &rpc.Error{Code: rpc.CodeBadRequest, Message: resp.Error}
	}
	return resp.Servers, nil
}

// AnnounceRefresh tells every tool runner and hooks worker on the bus,
// without waiting for an answer, that the tool lists changed (a runner
// reloaded its mcp.json): each drops its cached lists, as after
// RefreshRemote of every server.
func AnnounceRefresh(nc *nats.Conn, prefix string) error {
	data, err := json.Marshal(RefreshRequest{})
	if err != nil {
		return err
	}
	return nc.Publish(prefix+"."+SubjectRefresh, data)
}

// ActiveRemote asks a running tool runner for the executions running in
// every runner on the bus, oldest first.
func ActiveRemote(ctx context.Context, nc Requester, prefix string) ([]Execution, error) {
	var resp ActiveResponse
	if err := request(ctx, nc, prefix+"."+SubjectActive, struct{}{}, &resp); err != nil {
		return nil, err
	}
	return resp.Executions, nil
}

// CancelRemote asks the tool runners to cancel the execution id on behalf
// of actor. It returns nil once the owning runner cancelled it; an
// execution that is not running (or whose runner does not answer) is an
// *rpc.Error saying so; no runner at all is ErrNoRunner.
func CancelRemote(ctx context.Context, nc Requester, prefix, id, actor string) error {
	var resp CancelResponse
	if err := request(ctx, nc, prefix+"."+SubjectCancel, CancelRequest{ID: id, Actor: actor}, &resp); err != nil {
		return err
	}
	if !resp.Cancelled {
		return &rpc.Error{Code: rpc.CodeBadRequest, Message: cmp.Or(resp.Error, "execution "+id+" not cancelled")}
	}
	return nil
}

func request(ctx context.Context, nc Requester, subj string, in, out any) error {
	body, err := rpc.Call(ctx, nc, subj, in, remoteTimeout, runnerTarget)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decode reply of %s: %w", subj, err)
	}
	return nil
}

// Serve answers SubjectList, SubjectStatus and SubjectRefresh for r on nc as the micro
// service ServiceName (queue group QueueGroup), and the extra endpoints
// (ValidateEndpoint), until stop is called; stop drains the endpoints and
// returns once no request is being handled. log may be nil.
func Serve(ctx context.Context, nc *nats.Conn, prefix string, r *Runner, log *slog.Logger, extra ...rpc.Endpoint) (stop func() error, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	eps := append([]rpc.Endpoint{
		rpc.Endpoint{Name: "list", Subject: prefix + "." + SubjectList, ErrorBody: listError, Handle: func(ctx context.Context, data []byte) (any, error) {
			var req ListRequest
			if err := json.Unmarshal(data, &req); err != nil {
				e := rpc.Errorf(rpc.CodeBadRequest, "bad request: %v", err)
				return listError(e), e
			}
			var at mcpconfig.Location
			if req.At != nil {
				at = *req.At
			}
			resp := ListResponse{Tools: r.ToolsAt(ctx, req.Role, at)}
			if resp.Tools == nil {
				resp.Tools = []ToolInfo{}
			}
			return resp, nil
		}},
		rpc.Endpoint{Name: "status", Subject: prefix + "." + SubjectStatus, ErrorBody: statusError, Handle: func(context.Context, []byte) (any, error) {
			return r.Status(), nil
		}},
		rpc.Endpoint{Name: "refresh", Subject: prefix + "." + SubjectRefresh, ErrorBody: refreshError, Broadcast: true, Handle: func(_ context.Context, data []byte) (any, error) {
			var req RefreshRequest
			if err := json.Unmarshal(data, &req); err != nil {
				e := rpc.Errorf(rpc.CodeBadRequest, "bad request: %v", err)
				return refreshError(e), e
			}
			names, err := r.RefreshTools(req.Server)
			if err != nil {
				e := rpc.Errorf(rpc.CodeBadRequest, "%v", err)
				return refreshError(e), e
			}
			log.Info("tool lists refreshed on request", "servers", names)
			return RefreshResponse{Servers: names}, nil
		}},
	}, execEndpoints(nc, prefix, r)...)
	eps = append(eps, extra...)
	srv, err := rpc.Start(ctx, nc, rpc.Config{
		Name:        ServiceName,
		Description: "relay tool runner: the MCP tools a role may call, the MCP servers' status, the running executions",
		Prefix:      prefix,
		QueueGroup:  QueueGroup,
		Logger:      log,
	}, eps...)
	if err != nil {
		return nil, err
	}
	return srv.Stop, nil
}

// execEndpoints list and cancel executions: active and cancel in the queue
// group, cancel-owned on the runner's own subject.
func execEndpoints(nc *nats.Conn, prefix string, r *Runner) []rpc.Endpoint {
	return []rpc.Endpoint{
		rpc.Endpoint{Name: "active", Subject: prefix + "." + SubjectActive, ErrorBody: activeError, Handle: func(ctx context.Context, _ []byte) (any, error) {
			es, err := r.Active(ctx)
			if err != nil {
				e := rpc.Errorf(rpc.CodeUnavailable, "%v", err)
				return activeError(e), e
			}
			return ActiveResponse{Executions: es}, nil
		}},
		rpc.Endpoint{Name: "cancel", Subject: prefix + "." + SubjectCancel, ErrorBody: cancelError, Handle: func(ctx context.Context, data []byte) (any, error) {
			return answerCancel(data, func(req CancelRequest) error { return r.cancelAnywhere(ctx, nc, prefix, req) })
		}},
		rpc.Endpoint{Name: "cancel-owned", Subject: ownerSubject(prefix, r.ID()), ErrorBody: cancelError, Broadcast: true, Handle: func(_ context.Context, data []byte) (any, error) {
			return answerCancel(data, func(req CancelRequest) error {
				if !r.Cancel(req.ID, req.Actor) {
					return rpc.Errorf(rpc.CodeBadRequest, "execution %s is no longer running", req.ID)
				}
				return nil
			})
		}},
	}
}

// ownerSubject is where the runner id takes cancels of its own executions.
func ownerSubject(prefix, id string) string { return prefix + "." + SubjectCancel + "." + id }

// answerCancel decodes a CancelRequest and answers with cancel's outcome.
func answerCancel(data []byte, cancel func(CancelRequest) error) (any, error) {
	var req CancelRequest
	if err := json.Unmarshal(data, &req); err != nil || req.ID == "" {
		e := rpc.Errorf(rpc.CodeBadRequest, "bad request: want {\"id\": \"<execution id>\", \"actor\": \"<who>\"}")
		return cancelError(e), e
	}
	if err := cancel(req); err != nil {
		var e *rpc.Error
		if !errors.As(err, &e) {
			e = rpc.Errorf(rpc.CodeUnavailable, "%v", err)
		}
		return cancelError(e), e
	}
	return CancelResponse{Cancelled: true}, nil
}

// cancelAnywhere cancels req.ID here, or forwards req to the runner that
// owns it (found in the shared active executions).
func (r *Runner) cancelAnywhere(ctx context.Context, nc Requester, prefix string, req CancelRequest) error {
	if r.Cancel(req.ID, req.Actor) {
		return nil
	}
	es, err := r.Active(ctx)
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.ID != req.ID || e.Owner == r.ID() {
			continue
		}
		if e.Process != "" {
			return rpc.Errorf(rpc.CodeBadRequest, "%s", e.ProcessCancel())
		}
		_, err := rpc.Call(ctx, nc, ownerSubject(prefix, e.Owner), req, remoteTimeout, runnerTarget)
		if errors.Is(err, ErrNoRunner) {
			return rpc.Errorf(rpc.CodeUnavailable, "the runner that runs execution %s does not answer (its slot is freed when its lease expires)", req.ID)
		}
		return err
	}
	return rpc.Errorf(rpc.CodeBadRequest, "no active execution %s (`relay mcp active` lists them)", req.ID)
}

func activeError(e *rpc.Error) any {
	return ActiveResponse{Executions: []Execution{}, Error: e.Message}
}

func cancelError(e *rpc.Error) any { return CancelResponse{Error: e.Message} }

func listError(e *rpc.Error) any { return ListResponse{Tools: []ToolInfo{}, Error: e.Message} }

func refreshError(e *rpc.Error) any { return RefreshResponse{Servers: []string{}, Error: e.Message} }

func statusError(e *rpc.Error) any {
	return StatusResponse{Servers: []ServerStatus{}, Error: e.Message}
}
