package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/internal/rpc"
)

// The bus path of a question, relative to the bus prefix. Both are
// request/reply (no stream captures rpc.>), answered by the approvals
// worker's micro service ElicitService (queue group "approvals"), which
// keeps the question's state.
//
//  1. The runner subscribes to a fresh inbox and requests SubjectElicit with
//     ElicitRequest{Question, Inbox}. The worker replies ElicitReply{Status:
//     "asked"} after posting the form in the call's Slack thread, or
//     "no_human" (not a Slack thread, nothing postable); no responders means
//     no approvals worker runs. Both "no human" cases apply the schema's
//     defaults.
//  2. When the person answers (whichever worker instance handles the click),
//     the worker publishes ElicitReply{Status: "answered", Answer} to the inbox.
//  3. At the deadline the runner requests SubjectElicitExpire with the
//     question id: the worker marks it expired (the form says so) and replies
//     "expired", or "answered" with the answer that won the race. The
//     worker's compare-and-set record decides, so Slack and the server agree.
const (
	SubjectElicit       = "rpc.elicit.ask"
	SubjectElicitExpire = "rpc.elicit.expire"
)

// Reply statuses of the elicitation subjects.
const (
	ElicitAsked    = "asked"
	ElicitNoHuman  = "no_human"
	ElicitAnswered = "answered"
	ElicitExpired  = "expired"
)

// ElicitService is the approvals worker's micro service answering the
// elicitation subjects.
const ElicitService = "relay-approvals"

// ElicitRequest is the body of a SubjectElicit request.
type ElicitRequest struct {
	Question *Question `json:"question"`
	// Inbox is where the answer is published later.
	Inbox string `json:"inbox"`
}

// ElicitReply is what the approvals worker replies, and publishes on the
// question's inbox.
type ElicitReply struct {
	Status string  `json:"status"`
	Reason string  `json:"reason,omitempty"`
	Answer *Answer `json:"answer,omitempty"`
}

// ElicitExpire asks the worker to close a question unanswered.
type ElicitExpire struct {
	ID string `json:"id"`
	// Cancel closes it as cancelled rather than expired (the server was
	// disabled or the runner closed), Reason saying why.
	Cancel bool   `json:"cancel,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ErrElicitTimeout is a question nobody answered before its deadline (the
// runner declines it).
var ErrElicitTimeout = errors.New("nobody answered in time")

// BusElicitor is the Elicitor of the tool runner: it asks over the bus (see
// SubjectElicit). Questions of calls outside a Slack thread are not sent.
type BusElicitor struct {
	nc     *nats.Conn
	prefix string
	// AckTimeout bounds the wait for the worker's first reply. Default 10s.
	AckTimeout time.Duration
}

// NewBusElicitor returns the Elicitor asking on nc under prefix ("relay").
func NewBusElicitor(nc *nats.Conn, prefix string) *BusElicitor {
	return &BusElicitor{nc: nc, prefix: prefix, AckTimeout: 10 * time.Second}
}

// Elicit implements Elicitor.
func (b *BusElicitor) Elicit(ctx context.Context, q *Question) (*Answer, error) {
	if len(q.Thread) < 6 || q.Thread[:6] != "slack:" {
		return nil, fmt.Errorf("%w: the call belongs to no Slack thread", ErrNoHuman)
	}
	inbox := b.nc.NewRespInbox()
	sub, err := b.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("elicit %s: %w", q.ID, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	actx, cancel := context.WithTimeout(ctx, b.AckTimeout)
	first, err := b.call(actx, SubjectElicit, ElicitRequest{Question: q, Inbox: inbox})
	cancel()
	var rerr *rpc.Error
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: no approvals worker runs", ErrNoHuman)
	case errors.As(err, &rerr):
		return nil, fmt.Errorf("%w: %s", ErrNoHuman, rerr.Message)
	case err != nil && ctx.Err() == nil && q.Resumable:
		// The question may have been posted: the call's redelivery asks
		// again with the same id and attaches to it.
		return nil, fmt.Errorf("%w: the approvals worker's reply was lost: %w", ErrInterrupted, err)
	case err != nil && ctx.Err() == nil:
		return nil, fmt.Errorf("%w: the approvals worker did not answer: %v", ErrNoHuman, err)
	case err != nil:
		return b.closeUnanswered(ctx, q, err)
	case first.Status == ElicitNoHuman:
		return nil, fmt.Errorf("%w: %s", ErrNoHuman, first.Reason)
	case first.Status == ElicitAnswered && first.Answer != nil:
		return first.Answer, nil
	}
	r, err := next(ctx, sub)
	if err != nil {
		return b.closeUnanswered(ctx, q, err)
	}
	if r.Answer == nil {
		return nil, fmt.Errorf("elicit %s: reply %q without an answer", q.ID, r.Status)
	}
	return r.Answer, nil
}

// closeUnanswered expires the question after its wait (ctx) ended with
// cause, or cancels it when ctx's cause is a disabled server or a closing
// runner; an answer that won the race is returned instead.
//
// A resumable question whose wait ended otherwise (the runner stops, the
// bus connection broke) is left open: ErrInterrupted.
func (b *BusElicitor) closeUnanswered(ctx context.Context, q *Question, cause error) (*Answer, error) {
	if q.Resumable && interrupted(ctx, context.Cause(ctx), q, cause) {
		return nil, fmt.Errorf("%w: %w", ErrInterrupted, cause)
	}
	exp := ElicitExpire{ID: q.ID}
	if c := context.Cause(ctx); errors.Is(c, ErrDisabled) || errors.Is(c, ErrClosed) {
		exp.Cancel, exp.Reason = true, c.Error()
		cause = c
	}
	a, err := b.expireAnswer(exp)
	if a != nil {
		return a, nil
	}
	if exp.Cancel {
		return nil, errors.Join(cause, err)
	}
	return nil, errors.Join(fmt.Errorf("%w: %w", ErrElicitTimeout, cause), err)
}

// expireAnswer closes the question; an answer that won the race is returned.
func (b *BusElicitor) expireAnswer(exp ElicitExpire) (*Answer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := b.call(ctx, SubjectElicitExpire, exp)
	if err != nil {
		return nil, fmt.Errorf("expire question %s: %w", exp.ID, err)
	}
	if r.Status == ElicitAnswered && r.Answer != nil {
		return r.Answer, nil
	}
	return nil, nil
}

// approvalsTarget names the approvals worker in client errors.
var approvalsTarget = rpc.Target{Service: "approvals worker", Start: "`relay approvals` or `relay serve` with Slack settings", Err: ErrNoHuman}

// call sends one request to the approvals worker's service.
func (b *BusElicitor) call(ctx context.Context, subject string, req any) (*ElicitReply, error) {
	body, err := rpc.Call(ctx, b.nc, b.prefix+"."+subject, req, 0, approvalsTarget)
	if err != nil {
		return nil, err
	}
	var r ElicitReply
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decode reply of %s: %w", subject, err)
	}
	return &r, nil
}

// next reads one ElicitReply from sub; a no-responders status is
// nats.ErrNoResponders.
func next(ctx context.Context, sub *nats.Subscription) (*ElicitReply, error) {
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, err
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	var r ElicitReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("decode elicitation reply: %w", err)
	}
	return &r, nil
}
