package approvals

// The console's endpoints (internal/rpc/approvalrpc): the approvals list and
// decisions taken in the operator console. A decision runs the same
// revision-checked transitions and finish as a Slack click, so whichever
// comes first wins and the answer is posted once.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/internal/rpc/approvalrpc"
)

// ConsolePrefix marks a decider in Record.DecidedBy and EditedBy who decided
// in the operator console: "console:{operator}".
const ConsolePrefix = "console:"

func (s *Service) consoleEndpoints(prefix string) []rpc.Endpoint {
	listErr := func(e *rpc.Error) any { return listFailed(e) }
	getErr := func(e *rpc.Error) any { return approvalrpc.GetResponse{Error: e.Message} }
	decideErr := func(e *rpc.Error) any { return approvalrpc.DecideResponse{Error: e.Message} }
	return []rpc.Endpoint{
		{Name: "approvals-list", Subject: prefix + "." + approvalrpc.SubjectList, ErrorBody: listErr, Handle: s.consoleList},
		{Name: "approvals-get", Subject: prefix + "." + approvalrpc.SubjectGet, ErrorBody: getErr, Handle: s.consoleGet},
		{Name: "approvals-decide", Subject: prefix + "." + approvalrpc.SubjectDecide, ErrorBody: decideErr, Handle: s.consoleDecide},
	}
}

// consoleList answers approvalrpc.ListRequest.
func (s *Service) consoleList(ctx context.Context, data []byte) (any, error) {
	var req approvalrpc.ListRequest
	if err := json.Unmarshal(data, &req); err != nil {
		e := rpc.Errorf(rpc.CodeBadRequest, "bad list request: %v", err)
		return listFailed(e), e
	}
	if req.Limit <= 0 {
		req.Limit = 100
	}
	keys, err := s.store.keys(ctx)
	if err != nil {
		e := rpc.Errorf(rpc.CodeUnavailable, "list approvals: %v", err)
		return listFailed(e), e
	}
	type listed struct {
		approvalrpc.Item
		rev uint64 // the record's last write: the order of two alike times
	}
	var found []listed
	for _, k := range keys {
		rec, rev, err := s.store.getKey(ctx, k)
		if err != nil || (!req.All && !req.Decided && rec.Status != StatusPending) || (req.Decided && rec.Status == StatusPending) {
			continue
		}
		found = append(found, listed{itemOf(rec), rev})
	}
	at := func(it approvalrpc.Item) time.Time { return it.CreatedAt }
	if req.Decided {
		at = decidedAt
	}
	// Newest first; times are kept to the millisecond, so two in one
	// millisecond go by which was written last.
	slices.SortFunc(found, func(a, b listed) int { return cmp.Or(at(b.Item).Compare(at(a.Item)), cmp.Compare(b.rev, a.rev)) })
	items := make([]approvalrpc.Item, len(found))
	for i, f := range found {
		items[i] = f.Item
	}
	total := len(items)
	items = items[:min(total, req.Limit)]
	if req.Preview > 0 {
		for i := range items {
			items[i] = previewItem(items[i], req.Preview)
		}
	}
	fitted, omitted := fit(items, s.replyBudget())
	return approvalrpc.ListResponse{Items: fitted, Total: total, Omitted: omitted}, nil
}

// previewItem cuts its Text and Original to n bytes each, marking a cut.
func previewItem(it approvalrpc.Item, n int) approvalrpc.Item {
	text, orig := clip.Within(it.Text, n), clip.Within(it.Original, n)
	if text != it.Text || orig != it.Original {
		it.Text, it.Original, it.Cut = text, orig, true
	}
	return it
}

// consoleGet answers approvalrpc.GetRequest: one record, its texts whole.
// The item always fits a reply: the record holding its texts (and more)
// fitted the bucket, whose values the max payload bounds.
func (s *Service) consoleGet(ctx context.Context, data []byte) (any, error) {
	var req approvalrpc.GetRequest
	if err := json.Unmarshal(data, &req); err != nil || req.TaskID == "" {
		e := rpc.Errorf(rpc.CodeBadRequest, "bad get request: want a task_id")
		return approvalrpc.GetResponse{Error: e.Message}, e
	}
	rec, _, err := s.store.get(ctx, req.TaskID)
	if err != nil {
		e := recordError("get approval", req.TaskID, err)
		return approvalrpc.GetResponse{Error: e.Message}, e
	}
	return approvalrpc.GetResponse{Item: itemOf(rec)}, nil
}

// recordError is the answer to a failed read or change of task's record:
// no record is the caller's mistake, anything else the store's.
func recordError(op, task string, err error) *rpc.Error {
	if errors.Is(err, ErrNotFound) {
		return rpc.Errorf(rpc.CodeBadRequest, "no approval for task %s", task)
	}
	if errors.Is(err, errConsole) {
		return rpc.Errorf(rpc.CodeBadRequest, "%s %s: %v", op, task, err)
	}
	return rpc.Errorf(rpc.CodeUnavailable, "%s %s: %v", op, task, err)
}

// replyMargin is the room a reply keeps below the max payload for what is
// not its items: the rest of the body, micro's headers.
const replyMargin = 4 << 10

// replyBudget is how many bytes of items one reply may carry: the server's
// max payload (NATS's default, 1 MB, when not connected) less replyMargin.
func (s *Service) replyBudget() int {
	limit := s.bus.Conn().MaxPayload()
	if limit <= 0 {
		limit = 1 << 20
	}
	return int(limit) - replyMargin
}

// fit returns the longest prefix of items whose JSON takes at most budget
// bytes, and how many items it leaves out. It keeps a prefix, so what is
// shown stays the newest ones.
func fit(items []approvalrpc.Item, budget int) ([]approvalrpc.Item, int) {
	used := 0
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil || used+len(b)+1 > budget {
			return items[:i], len(items) - i
		}
		used += len(b) + 1 // and a comma
	}
	return items, 0
}

// decidedAt is when an item was decided: an expired one, which nobody
// decided, when it expired.
func decidedAt(it approvalrpc.Item) time.Time {
	if it.DecidedAt.IsZero() {
		return it.ExpiresAt
	}
	return it.DecidedAt
}

// listFailed answers a list request that failed with e: no items (an empty
// list, not null) and e's message.
func listFailed(e *rpc.Error) approvalrpc.ListResponse {
	return approvalrpc.ListResponse{Items: []approvalrpc.Item{}, Error: e.Message}
}

// itemOf is the console's view of a record.
func itemOf(r *Record) approvalrpc.Item {
	var sugg envelope.Envelope
	_ = json.Unmarshal(r.Suggestion, &sugg)
	it := approvalrpc.Item{
		TaskID: r.TaskID, Round: r.Round, Status: string(r.Status), Text: r.Text, Target: r.Target.String(),
		Thread: sugg.Meta.Thread, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		EditedBy: r.EditedBy, DecidedBy: r.DecidedBy, DecidedAt: r.DecidedAt, Reason: r.Reason,
	}
	if sugg.Content != r.Text {
		it.Original = sugg.Content
	}
	if sugg.Meta.Source != nil {
		it.SourceURL = sugg.Meta.Source.URL
	}
	return it
}

// errConsole is a decision request the worker refuses.
var errConsole = errors.New("bad decision request")

// consoleDecide answers approvalrpc.DecideRequest.
func (s *Service) consoleDecide(ctx context.Context, data []byte) (any, error) {
	var req approvalrpc.DecideRequest
	err := json.Unmarshal(data, &req)
	if err == nil {
		err = checkDecide(&req)
	}
	if err != nil {
		e := rpc.Errorf(rpc.CodeBadRequest, "%v", err)
		return approvalrpc.DecideResponse{Error: e.Message}, e
	}
	rec, won, err := s.decideFromConsole(ctx, req)
	if err != nil {
		e := recordError("decide task", req.TaskID, err)
		return approvalrpc.DecideResponse{Error: e.Message}, e
	}
	return approvalrpc.DecideResponse{Item: itemOf(rec), Won: won}, nil
}

func checkDecide(req *approvalrpc.DecideRequest) error {
	req.By = strings.TrimSpace(req.By)
	switch {
	case req.TaskID == "":
		return fmt.Errorf("%w: no task_id", errConsole)
	case req.By == "":
		return fmt.Errorf("%w: no operator (by)", errConsole)
	case req.Action == approvalrpc.ActionEdit && strings.TrimSpace(req.Text) == "":
		return fmt.Errorf("%w: an edit needs the new text", errConsole)
	case !slices.Contains([]string{approvalrpc.ActionApprove, approvalrpc.ActionEdit, approvalrpc.ActionReject}, req.Action):
		return fmt.Errorf("%w: unknown action %q (approve, edit, reject)", errConsole, req.Action)
	}
	return nil
}

// decideFromConsole runs the decision and finishes the round; it returns
// the record afterwards and whether this request made the change.
func (s *Service) decideFromConsole(ctx context.Context, req approvalrpc.DecideRequest) (*Record, bool, error) {
	user := ConsolePrefix + req.By
	if req.Action != approvalrpc.ActionReject {
		if rec, _, err := s.store.get(ctx, req.TaskID); err == nil && rec.Step != nil {
			return nil, false, fmt.Errorf("%w: %s runs with the approver's own account; approve it in Slack (the console may reject it)", errConsole, rec.Step.Tool)
		}
	}
	var (
		rec      *Record
		won, exp bool
		err      error
	)
	switch req.Action {
	case approvalrpc.ActionEdit:
		rec, won, exp, err = s.store.mutateEdit(ctx, s.now(), viewMetadata{TaskID: req.TaskID, Round: req.Round}, user, req.Text)
	default:
		status, reason := StatusApproved, ""
		if req.Action == approvalrpc.ActionReject {
			status, reason = StatusRejected, cmp.Or(strings.TrimSpace(req.Reason), "rejected in the console")
		}
		rec, won, exp, err = s.decision(ctx, req.TaskID, req.Round, func(r *Record, now time.Time) {
			r.Status, r.DecidedBy, r.DecidedAt, r.Reason = status, user, now, reason
		})
	}
	if err != nil {
		return nil, false, err
	}
	if err := s.finish(ctx, rec); err != nil {
		return nil, false, err
	}
	if won || exp {
		s.consoleAudit(ctx, rec, user, req.Action, exp)
	}
	s.log.Info("decided in the console", "task_id", rec.TaskID, "round", rec.Round, "action", req.Action, "by", user, "won", won, "expired", exp)
	return rec, won, nil
}

// consoleAudit records a console decision on audit.approvals (decisions are
// also audited by finish, as Slack's are; an edit only here).
func (s *Service) consoleAudit(ctx context.Context, rec *Record, user, action string, expired bool) {
	if expired {
		action = "expired"
	} else if action != approvalrpc.ActionEdit {
		return // finish announced and audited it
	}
	_ = s.publishAudit(ctx, fmt.Sprintf("audit:console:%s:%s:%d", action, rec.ApprovalID(), len(rec.Text)), auditRecord{
		Action: action, TaskID: rec.TaskID, Round: rec.Round, User: user, Allowed: true, Status: string(rec.Status),
		Target: rec.Target.String(), At: s.now(),
	}, threadOf(rec))
}
