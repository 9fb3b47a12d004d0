// Package approvalrpc is the request/reply contract of the approvals worker's
// console endpoints: the pending suggestions (rpc.approvals.list), one of
// them whole (rpc.approvals.get) and a decision on one
// (rpc.approvals.decide), answered by the micro service
// "relay-approvals" (queue group "approvals"), and the client side of them.
//
// A decision asked here goes through the same revision-checked transitions
// as a Slack button, so a console click, a Slack click, a double click and a
// redelivery agree on one decision and one outbound post.
package approvalrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/relaystation/relay/internal/rpc"
)

// Subjects, relative to the bus prefix.
const (
	// SubjectList answers ListRequest with ListResponse.
	SubjectList = "rpc.approvals.list"
	// SubjectGet answers GetRequest with GetResponse.
	SubjectGet = "rpc.approvals.get"
	// SubjectDecide answers DecideRequest with DecideResponse.
	SubjectDecide = "rpc.approvals.decide"
)

// The actions of DecideRequest.
const (
	ActionApprove = "approve"
	ActionEdit    = "edit"
	ActionReject  = "reject"
)

// Item is one task's approval as the console shows it.
type Item struct {
	TaskID    string    `json:"task_id"`
	Round     int       `json:"round"`
	Status    string    `json:"status"`
	Text      string    `json:"text"`
	Original  string    `json:"original,omitempty"`
	Target    string    `json:"target"`
	Thread    string    `json:"thread,omitempty"`
	SourceURL string    `json:"source_url,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	EditedBy  string    `json:"edited_by,omitempty"`
	DecidedBy string    `json:"decided_by,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	// Cut is set when Text or Original is a preview (ListRequest.Preview):
	// Get returns the item whole.
	Cut bool `json:"cut,omitempty"`
}

// PreviewBytes is the Preview a console asks for: enough to read a
// suggestion, small enough for 100 of them in one reply.
const PreviewBytes = 4 << 10

// ListRequest asks for approvals: only pending ones unless All is set, at
// most Limit (default 100), newest first. Decided asks for the decided ones
// only (approved, rejected, expired), the most recently decided first, so
// a backlog of pending ones does not hide them; workers before it ignore
// it, so a caller sets All too and keeps the items that are not pending.
// Preview, when positive, cuts each item's Text and Original to at most that
// many bytes and marks the items cut (Item.Cut); without it texts are whole
// and a long list may omit items (ListResponse.Omitted). Workers before it
// ignore it.
type ListRequest struct {
	All     bool `json:"all,omitempty"`
	Decided bool `json:"decided,omitempty"`
	Limit   int  `json:"limit,omitempty"`
	Preview int  `json:"preview,omitempty"`
}

// ListResponse answers ListRequest. Total is how many approvals matched
// before Limit cut the list (workers before it send 0). Omitted is how many
// of the first Limit were left out so that the reply fits the server's max
// payload (the oldest, or the least recently decided, ones); they count in
// Total.
type ListResponse struct {
	Items   []Item `json:"items"`
	Total   int    `json:"total,omitempty"`
	Omitted int    `json:"omitted,omitempty"`
	Error   string `json:"error,omitempty"`
}

// GetRequest asks for the approval of task TaskID whole: its current round.
type GetRequest struct {
	TaskID string `json:"task_id"`
}

// GetResponse answers GetRequest.
type GetResponse struct {
	Item  Item   `json:"item"`
	Error string `json:"error,omitempty"`
}

// DecideRequest decides the pending round Round of task TaskID (0: the
// current round) on behalf of By (the console operator). Text is an edit's
// new text; Reason a rejection's reason.
type DecideRequest struct {
	TaskID string `json:"task_id"`
	Round  int    `json:"round,omitempty"`
	Action string `json:"action"`
	By     string `json:"by"`
	Text   string `json:"text,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// DecideResponse says how the record stands after the request. Won is true
// when this request made the change (false for a second click: Item says
// who decided first).
type DecideResponse struct {
	Item  Item   `json:"item"`
	Won   bool   `json:"won"`
	Error string `json:"error,omitempty"`
}

// ErrNoApprovals matches a request no approvals worker answered.
var ErrNoApprovals = errors.New("no approvals worker")

var target = rpc.Target{Service: "approvals worker", Start: "`relay approvals` or `relay serve`", Err: ErrNoApprovals}

// Requester sends a NATS request; *nats.Conn is one.
type Requester = rpc.Requester

const timeout = 10 * time.Second

// List asks the approvals worker for approvals.
func List(ctx context.Context, nc Requester, prefix string, req ListRequest) ([]Item, error) {
	items, _, err := ListTotal(ctx, nc, prefix, req)
	return items, err
}

// ListTotal is List that also returns how many approvals matched before the
// limit (the number of items from a worker that does not say).
func ListTotal(ctx context.Context, nc Requester, prefix string, req ListRequest) ([]Item, int, error) {
	resp, err := ListPage(ctx, nc, prefix, req)
	if err != nil {
		return nil, 0, err
	}
	return resp.Items, resp.Total, nil
}

// ListPage is List with the whole answer. Total is at least the number of
// items (a worker before it sends none).
func ListPage(ctx context.Context, nc Requester, prefix string, req ListRequest) (*ListResponse, error) {
	var resp ListResponse
	if err := call(ctx, nc, prefix+"."+SubjectList, req, &resp, &resp.Error); err != nil {
		return nil, err
	}
	resp.Total = max(resp.Total, len(resp.Items)+resp.Omitted)
	return &resp, nil
}

// Get asks the approvals worker for one approval, its texts whole.
func Get(ctx context.Context, nc Requester, prefix string, req GetRequest) (*Item, error) {
	var resp GetResponse
	if err := call(ctx, nc, prefix+"."+SubjectGet, req, &resp, &resp.Error); err != nil {
		return nil, err
	}
	return &resp.Item, nil
}

// Decide asks the approvals worker to decide.
func Decide(ctx context.Context, nc Requester, prefix string, req DecideRequest) (*DecideResponse, error) {
	var resp DecideResponse
	if err := call(ctx, nc, prefix+"."+SubjectDecide, req, &resp, &resp.Error); err != nil {
		return nil, err
	}
	return &resp, nil
}

func call(ctx context.Context, nc Requester, subj string, in, out any, errField *string) error {
	body, err := rpc.Call(ctx, nc, subj, in, timeout, target)
	var re *rpc.Error
	if err != nil && !errors.As(err, &re) {
		return err
	}
	if uerr := json.Unmarshal(body, out); uerr != nil && err == nil {
		return fmt.Errorf("decode reply of %s: %w", subj, uerr)
	}
	if err != nil {
		return err
	}
	if *errField != "" {
		return &rpc.Error{Code: rpc.CodeBadRequest, Message: *errField}
	}
	return nil
}
