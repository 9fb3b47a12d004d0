package approvals

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
)

// Status is where an approval stands.
type Status string

// The statuses. Pending is the only one that can change; the others are final
// for their round.
const (
	StatusPending  Status = "pending"
	StatusApproved Status = "approved"
	StatusRejected Status = "rejected"
	StatusExpired  Status = "expired"
)

// Record is the durable state of one task's approval, the value of the
// approvals bucket under the task's key.
type Record struct {
	// TaskID is the task (meta.task_id of the suggestion).
	TaskID string `json:"task_id"`
	// Round counts the suggestions put up for a decision in this task's thread,
	// from 1. Outbound identities of rounds after the first carry ":{round}".
	Round int `json:"round"`
	// Status of the current round.
	Status Status `json:"status"`
	// Text is the answer to post: the suggestion's content, or the edited text.
	Text string `json:"text"`
	// Suggestion is the suggestion envelope of the current round (its content
	// is the original text); the outbound envelope is built from it.
	Suggestion json.RawMessage `json:"suggestion"`
	// SuggestionIDs are the envelope ids already handled (most recent last,
	// bounded), so a redelivered suggestion changes nothing.
	SuggestionIDs []string `json:"suggestion_ids"`
	// Target is where the answer goes.
	Target envelope.Target `json:"target"`
	// SlackChannel and SlackTS locate the approval message of this round;
	// ThreadTS is the first round's message, the task's thread. SlackTS is empty
	// until the message was posted.
	SlackChannel string `json:"slack_channel"`
	SlackTS      string `json:"slack_ts,omitempty"`
	ThreadTS     string `json:"thread_ts,omitempty"`
	// CreatedAt is when this round started; ExpiresAt when it expires.
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// EditedBy is the last editor's Slack user id.
	EditedBy string `json:"edited_by,omitempty"`
	// DecidedBy and DecidedAt say who decided (empty for an expiry).
	DecidedBy string    `json:"decided_by,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Reason is a rejection's reason.
	Reason string `json:"reason,omitempty"`
	// Published is set once the approved answer was acknowledged by JetStream.
	Published bool `json:"published,omitempty"`
	// Posting is the claim of the handler posting the round's message, until
	// PostingUntil; it is cleared once SlackTS is recorded.
	Posting      string    `json:"posting,omitempty"`
	PostingUntil time.Time `json:"posting_until,omitzero"`
	// Shown is set once the Slack message shows the current state.
	Shown bool `json:"shown,omitempty"`
	// Announced is set once the decision was published on approval.decided.
	Announced bool `json:"announced,omitempty"`
	// TraceParent is the W3C trace context of the suggestion (when tracing
	// was on), so the approved answer's publish continues its trace.
	TraceParent string `json:"traceparent,omitempty"`
	// Step, set on the record of an agent's tool step (toolstep.go), is
	// the call to approve; Suggestion then holds the call's envelope and
	// TaskID is StepKey(task, call id).
	Step *ToolStep `json:"tool_step,omitempty"`
}

// maxSeen bounds Record.SuggestionIDs.
const maxSeen = 32

func (r *Record) seen(id string) bool {
	for _, s := range r.SuggestionIDs {
		if s == id {
			return true
		}
	}
	return false
}

func (r *Record) remember(id string) {
	r.SuggestionIDs = append(r.SuggestionIDs, id)
	if len(r.SuggestionIDs) > maxSeen {
		r.SuggestionIDs = r.SuggestionIDs[len(r.SuggestionIDs)-maxSeen:]
	}
}

// MsgID is the Nats-Msg-Id of the round's approved outbound envelope.
func (r *Record) MsgID() string { return "approve:" + r.TaskID + r.roundSuffix() }

// IdempotencyKey is meta.idempotency_key of the round's approved outbound envelope.
func (r *Record) IdempotencyKey() string { return "out:" + r.TaskID + r.roundSuffix() }

func (r *Record) roundSuffix() string {
	if r.Round <= 1 {
		return ""
	}
	return fmt.Sprintf(":%d", r.Round)
}

// ApprovalID identifies the round's decision (meta.approval.id).
func (r *Record) ApprovalID() string { return r.TaskID + r.roundSuffix() }

// Bucket is the approvals bucket name for a bus prefix: "{prefix}_approvals".
func Bucket(prefix string) string { return prefix + "_approvals" }

// Errors of the store.
var (
	// ErrNotFound means no approval record exists for the task.
	ErrNotFound = errors.New("approval not found")
	// ErrConflict means the record kept changing under a transition.
	ErrConflict = errors.New("approval record changed concurrently")
	// errNoChange lets a mutation leave the record as it is.
	errNoChange = errors.New("no change")
)

// store keeps records in a key-value bucket with revision-checked updates.
type store struct {
	kv jetstream.KeyValue

	// written holds the records this process wrote last, with their
	// revisions, so that the next change of one (a suggestion's record is
	// written three times in a row: created, claimed, posted) starts from it
	// instead of reading it back. The revision check of the write keeps that
	// safe: if anyone wrote since, the write fails and the record is read.
	mu      sync.Mutex
	written map[string]writtenRecord
}

type writtenRecord struct {
	rec Record
	rev uint64
}

// maxWritten bounds store.written; when it is full it starts again empty.
const maxWritten = 1024

func openStore(ctx context.Context, b *bus.Bus, retention time.Duration) (*store, error) {
	name := Bucket(b.Prefix())
	kv, err := b.OpenBucket(ctx, name, "relay approvals: one record per task (pending, approved, rejected, expired)", retention)
	if err != nil {
		return nil, err
	}
	return &store{kv: kv, written: make(map[string]writtenRecord)}, nil
}

// lastWritten is the task's record as this process last wrote it, if it
// still knows it.
func (s *store) lastWritten(task string) (*Record, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.written[task]
	if !ok {
		return nil, 0, false
	}
	r := w.rec
	return &r, w.rev, true
}

// wrote remembers r as the task's record at rev (forgets it when r is nil).
func (s *store) wrote(task string, r *Record, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r == nil {
		delete(s.written, task)
		return
	}
	if len(s.written) >= maxWritten {
		clear(s.written)
	}
	c := *r
	c.SuggestionIDs = slices.Clone(r.SuggestionIDs)
	s.written[task] = writtenRecord{rec: c, rev: rev}
}

var keyRE = regexp.MustCompile(`^[-_=.a-zA-Z0-9]{1,128}$`)

// key is the bucket key of a task id: the id itself when it is a valid key
// (UUIDs are), else a hash of it.
func key(task string) string {
	if keyRE.MatchString(task) && task[0] != '.' && task[len(task)-1] != '.' {
		return task
	}
	sum := sha256.Sum256([]byte(task))
	return "h-" + hex.EncodeToString(sum[:16])
}

func (s *store) get(ctx context.Context, task string) (*Record, uint64, error) {
	e, err := s.kv.Get(ctx, key(task))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("task %s: %w", task, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read approval %s: %w", task, err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("decode approval %s: %w", task, err)
	}
	return &r, e.Revision(), nil
}

// mutate applies fn to the task's record (nil when there is none) and writes
// the result with a revision check, retrying on conflict. fn returns the record
// to write (which may be a new one), or errNoChange to leave it, or another
// error to stop. mutate returns the record as stored afterwards.
//
// It starts from the record as this process last wrote it, when it knows it;
// only a write can go by that (its revision check fails if the record changed
// since): fn's errNoChange or error is decided again on the record read.
func (s *store) mutate(ctx context.Context, task string, fn func(r *Record) (*Record, error)) (*Record, error) {
	for range 20 {
		var err error
		cur, rev, known := s.lastWritten(task)
		if !known {
			if cur, rev, err = s.get(ctx, task); err != nil && !errors.Is(err, ErrNotFound) {
				return nil, err
			}
		}
		var next *Record
		if cur != nil {
			c := *cur
			c.SuggestionIDs = append([]string(nil), cur.SuggestionIDs...)
			next, err = fn(&c)
		} else {
			next, err = fn(nil)
		}
		if err != nil && known {
			s.wrote(task, nil, 0) // decide that on the record as it is stored
			continue
		}
		if errors.Is(err, errNoChange) {
			return cur, nil
		}
		if err != nil {
			return cur, err
		}
		b, err := json.Marshal(next)
		if err != nil {
			return nil, fmt.Errorf("encode approval %s: %w", task, err)
		}
		var wrote uint64
		if cur == nil {
			wrote, err = s.kv.Create(ctx, key(task), b)
		} else {
			wrote, err = s.kv.Update(ctx, key(task), b, rev)
		}
		switch {
		case err == nil:
			s.wrote(task, next, wrote)
			return next, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			s.wrote(task, nil, 0)
			continue // somebody else wrote first: read again and re-decide
		default:
			s.wrote(task, nil, 0)
			return nil, fmt.Errorf("write approval %s: %w", task, err)
		}
	}
	return nil, fmt.Errorf("task %s: %w", task, ErrConflict)
}

// keys lists every key in the bucket (the sweep reads each record).
func (s *store) keys(ctx context.Context) ([]string, error) {
	l, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range l.Keys() {
		if strings.HasPrefix(k, anchorPrefix) {
			continue // a task's approval thread, not a record
		}
		out = append(out, k)
	}
	return out, nil
}

// getKey reads a record by bucket key (for the sweep).
func (s *store) getKey(ctx context.Context, k string) (*Record, uint64, error) {
	e, err := s.kv.Get(ctx, k)
	if err != nil {
		return nil, 0, err
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("decode approval %s: %w", k, err)
	}
	return &r, e.Revision(), nil
}
