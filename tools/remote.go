package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
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
	// QueueGroup makes one runner process answer each request.
	QueueGroup = "toolrunner"
)

// ListRequest asks for the tools of a role.
type ListRequest struct {
	Role string `json:"role"`
}

// ListResponse answers ListRequest.
type ListResponse struct {
	Tools []ToolInfo `json:"tools"`
	Error string     `json:"error,omitempty"`
}

// StatusResponse answers a status request.
type StatusResponse struct {
	Servers []ServerStatus `json:"servers"`
	Stopped bool           `json:"stopped"`
}

// Requester sends a NATS request; *nats.Conn is one.
type Requester interface {
	RequestWithContext(ctx context.Context, subj string, data []byte) (*nats.Msg, error)
}

// ErrNoRunner means no tool runner answered the request.
var ErrNoRunner = errors.New("no tool runner answered (is `relay toolrunner` or `relay serve` running?)")

// ListRemote asks a running tool runner for the tools role may call.
// prefix is the bus prefix ("relay"). Without a deadline on ctx it waits 5s.
func ListRemote(ctx context.Context, nc Requester, prefix, role string) ([]ToolInfo, error) {
	var resp ListResponse
	if err := request(ctx, nc, prefix+"."+SubjectList, ListRequest{Role: role}, &resp); err != nil {
		return nil, err
	}
	if resp.Error != "" {
		return nil, errors.New(resp.Error)
	}
	return resp.Tools, nil
}

// StatusRemote asks a running tool runner for its servers' status.
func StatusRemote(ctx context.Context, nc Requester, prefix string) (*StatusResponse, error) {
	var resp StatusResponse
	if err := request(ctx, nc, prefix+"."+SubjectStatus, struct{}{}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

func request(ctx context.Context, nc Requester, subj string, in, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	msg, err := nc.RequestWithContext(ctx, subj, b)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("request %s: %w: %w", subj, ErrNoRunner, err)
		}
		return fmt.Errorf("request %s: %w", subj, err)
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return fmt.Errorf("decode reply of %s: %w", subj, err)
	}
	return nil
}

// Serve answers SubjectList and SubjectStatus for r on nc until the returned
// function is called (it unsubscribes).
func Serve(nc *nats.Conn, prefix string, r *Runner) (stop func(), err error) {
	list, err := nc.QueueSubscribe(prefix+"."+SubjectList, QueueGroup, func(m *nats.Msg) {
		var req ListRequest
		var resp ListResponse
		if err := json.Unmarshal(m.Data, &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp.Tools = r.Tools(ctx, req.Role)
			cancel()
		}
		if resp.Tools == nil {
			resp.Tools = []ToolInfo{}
		}
		b, _ := json.Marshal(resp)
		_ = m.Respond(b)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", SubjectList, err)
	}
	status, err := nc.QueueSubscribe(prefix+"."+SubjectStatus, QueueGroup, func(m *nats.Msg) {
		b, _ := json.Marshal(StatusResponse{Servers: r.Servers(), Stopped: r.Stopped()})
		_ = m.Respond(b)
	})
	if err != nil {
		_ = list.Unsubscribe()
		return nil, fmt.Errorf("subscribe %s: %w", SubjectStatus, err)
	}
	return func() { _ = list.Unsubscribe(); _ = status.Unsubscribe() }, nil
}
