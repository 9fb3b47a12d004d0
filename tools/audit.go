package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/relaystation/relay/envelope"
)

// Record is one audit line: one per invocation, whatever its outcome. It
// never holds the arguments themselves, only their SHA-256.
type Record struct {
	// ID is the record's own id, a UUID.
	ID string `json:"id"`
	// Time is when the invocation ended.
	Time time.Time `json:"timestamp"`
	// ExecutionID is the execution's id (CallID, else a fresh UUID).
	ExecutionID string `json:"execution_id"`
	// RunID correlates the records of one run: the task, the thread of a
	// code block, the CLI invocation.
	RunID string `json:"run_id"`
	// CallID is the id of the tool-call envelope (empty for CLI calls).
	CallID string `json:"call_id,omitempty"`
	TaskID string `json:"task_id,omitempty"`
	Thread string `json:"thread,omitempty"`
	// AgentID and Role are the caller's ("cli" for `relay mcp call`).
	AgentID string `json:"agent_id,omitempty"`
	// Actor is who the call ran for (a person, the agent, "cli:<user>").
	Actor string `json:"actor,omitempty"`
	// Principal is whose own connection a per-user server's call used.
	Principal string `json:"principal,omitempty"`
	Role      string `json:"role,omitempty"`
	Server    string `json:"server"`
	Tool      string `json:"tool"`
	// ArgsSHA256 is the hex SHA-256 of the canonical JSON of the arguments
	// (object keys sorted, no spaces).
	ArgsSHA256 string `json:"args_sha256"`
	// Redacted says secrets were removed from the result.
	Redacted   bool    `json:"redaction_applied"`
	DurationMS float64 `json:"duration_ms"`
	Status     Status  `json:"status"`
	Error      string  `json:"error,omitempty"`
	// CancelledBy names who cancelled the execution (status cancelled).
	CancelledBy string `json:"cancelled_by,omitempty"`
	// Attempts counts the calls sent or tried (retries included).
	Attempts int `json:"attempts,omitempty"`
	// MCPTask is the server's task id of a call that ran as a task
	// (tasks.go); DurationMS then counts from the task's creation, also
	// across a runner restart.
	MCPTask string `json:"mcp_task_id,omitempty"`
}

// AuditSink receives every record after it was handed to the log (the
// service publishes them on the bus), which may be before the log's file
// has it (AuditLog). Audit must not block for long.
type AuditSink interface {
	Audit(ctx context.Context, r Record)
}

// ArgsHash returns the hex SHA-256 of the canonical JSON of args: the bytes
// json.Marshal writes (map keys sorted), so equal arguments hash equally.
func ArgsHash(args map[string]any) string {
	if args == nil {
		args = map[string]any{}
	}
	bp := hashBufs.Get().(*[]byte)
	b, err := envelope.AppendJSON((*bp)[:0], args)
	if err != nil {
		b = fmt.Appendf(b[:0], "unencodable: %v", err)
	}
	sum := sha256.Sum256(b)
	if cap(b) <= maxPooledBuf {
		*bp = b[:0]
		hashBufs.Put(bp)
	}
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// hashBufs hold the arguments' JSON while it is hashed.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledBuf is the largest buffer kept for reuse: one huge argument or
// record does not pin its memory.
const maxPooledBuf = 64 << 10

// AuditLog appends records as JSON lines to a file opened O_APPEND. It is
// safe for concurrent use.
//
// Write keeps the record and returns; the records reach the file in the
// order Write took them, encoded and written in one write(2) per batch:
// AuditFlushDelay after the first record of a batch, at once when a batch
// holds auditFlushRecords (that Write writes it), on Flush and on Close. A
// clean shutdown (Close) loses nothing; a crash of the process (SIGKILL, an
// unrecovered panic) loses the records of the last AuditFlushDelay at most.
// As before, nothing is fsynced: a crash of the machine can also lose what
// the kernel had not stored yet.
type AuditLog struct {
	mu      sync.Mutex
	f       *os.File
	recs    []Record // not written yet, guarded by mu
	spare   []Record // a written batch's slice, reused; guarded by mu
	armed   bool     // the timer will flush recs, guarded by mu
	failed  error    // a background flush's error, for the next Flush or Close when onError is nil; guarded by mu
	timer   *time.Timer
	delay   time.Duration
	onError func(err error, records int)

	// writeMu is held while a batch is encoded and written: batches reach
	// the file in the order they were taken.
	writeMu sync.Mutex
	line    []byte // the batch's lines, guarded by writeMu
}

// AuditFlushDelay bounds how long a record waits in an AuditLog before it
// is written: what a crash of the process can lose.
const AuditFlushDelay = 10 * time.Millisecond

// auditFlushRecords is the size of a batch the Write that fills it writes
// at once.
const auditFlushRecords = 512

// OpenAuditLog opens (creating it and its directory) the JSONL file at path.
func OpenAuditLog(path string) (*AuditLog, error) {
	return openAuditLog(path, AuditFlushDelay)
}

func openAuditLog(path string, delay time.Duration) (*AuditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("audit log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	l := &AuditLog{f: f, delay: delay}
	l.timer = time.AfterFunc(delay, l.flushLater)
	l.timer.Stop()
	return l, nil
}

// OnError sets what is told when a batch written in the background fails
// (records is how many it held). Without it, that error is returned by the
// next Flush or Close instead. Set it before the first Write.
func (l *AuditLog) OnError(fn func(err error, records int)) { l.onError = fn }

// Write appends a copy of r. It is in the file within AuditFlushDelay, or
// when Flush or Close returns.
func (l *AuditLog) Write(r *Record) error {
	l.mu.Lock()
	if l.f == nil {
		l.mu.Unlock()
		return fmt.Errorf("audit record %s: %w", r.ID, ErrClosed)
	}
	l.recs = append(l.recs, *r)
	full := len(l.recs) >= auditFlushRecords
	if !full && !l.armed {
		l.armed = true
		l.timer.Reset(l.delay)
	}
	l.mu.Unlock()
	if full {
		if _, err := l.flush(); err != nil {
			return fmt.Errorf("audit record %s: %w", r.ID, err)
		}
	}
	return nil
}

// Flush writes the records kept and returns its error, else a background
// flush's since the last Flush (when OnError is not set).
func (l *AuditLog) Flush() error {
	_, err := l.flush()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		err = l.failed
	}
	l.failed = nil
	return err
}

// flushLater is the timer's flush.
func (l *AuditLog) flushLater() {
	n, err := l.flush()
	switch {
	case err == nil:
	case l.onError != nil:
		l.onError(err, n)
	default:
		l.mu.Lock()
		if l.failed == nil {
			l.failed = err
		}
		l.mu.Unlock()
	}
}

// flush writes the records kept and reports how many there were.
func (l *AuditLog) flush() (int, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	recs, f := l.recs, l.f
	l.recs, l.spare, l.armed = l.spare[:0], nil, false
	l.mu.Unlock()
	if len(recs) == 0 {
		return 0, nil
	}
	var err error
	if f == nil {
		err = fmt.Errorf("%d audit records: %w", len(recs), ErrClosed)
	} else {
		err = l.writeBatch(f, recs)
	}
	clear(recs) // the strings they hold
	l.mu.Lock()
	l.spare = recs[:0]
	l.mu.Unlock()
	return len(recs), err
}

// writeBatch encodes recs and writes them in one write; writeMu is held. A
// record that cannot be encoded is left out and its error returned (as
// Write refused it when it wrote each line itself).
func (l *AuditLog) writeBatch(f *os.File, recs []Record) error {
	b := l.line[:0]
	var errs []error
	for i := range recs {
		line, err := recs[i].appendJSON(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("encode audit record %s: %w", recs[i].ID, err))
			continue
		}
		b = append(line, '\n')
	}
	if len(b) > 0 {
		if _, err := f.Write(b); err != nil {
			errs = append(errs, fmt.Errorf("write %d audit records: %w", len(recs), err))
		}
	}
	if cap(b) <= maxPooledBuf {
		l.line = b[:0]
	} else {
		l.line = nil
	}
	return errors.Join(errs...)
}

// appendJSON appends r as json.Marshal writes it (the field order and
// omitempty of its tags), without reflection.
func (r *Record) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = envelope.AppendString(b, r.ID)
	b = append(b, `,"timestamp":`...)
	b, err := envelope.AppendTime(b, r.Time)
	if err != nil {
		return nil, err
	}
	b = appendField(b, "execution_id", r.ExecutionID, false)
	b = appendField(b, "run_id", r.RunID, false)
	b = appendField(b, "call_id", r.CallID, true)
	b = appendField(b, "task_id", r.TaskID, true)
	b = appendField(b, "thread", r.Thread, true)
	b = appendField(b, "agent_id", r.AgentID, true)
	b = appendField(b, "actor", r.Actor, true)
	b = appendField(b, "principal", r.Principal, true)
	b = appendField(b, "role", r.Role, true)
	b = appendField(b, "server", r.Server, false)
	b = appendField(b, "tool", r.Tool, false)
	b = appendField(b, "args_sha256", r.ArgsSHA256, false)
	b = append(b, `,"redaction_applied":`...)
	b = strconv.AppendBool(b, r.Redacted)
	b = append(b, `,"duration_ms":`...)
	if b, err = appendFloat(b, r.DurationMS); err != nil {
		return nil, err
	}
	b = appendField(b, "status", string(r.Status), false)
	b = appendField(b, "error", r.Error, true)
	b = appendField(b, "cancelled_by", r.CancelledBy, true)
	if r.Attempts != 0 {
		b = append(b, `,"attempts":`...)
		b = strconv.AppendInt(b, int64(r.Attempts), 10)
	}
	b = appendField(b, "mcp_task_id", r.MCPTask, true)
	return append(b, '}'), nil
}

// appendField appends ,"key":"value"; omitEmpty leaves out an empty value.
func appendField(b []byte, key, value string, omitEmpty bool) []byte {
	if omitEmpty && value == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return envelope.AppendString(b, value)
}

// appendFloat appends f as encoding/json does: plain decimals in the range
// it writes them so (every duration), else through encoding/json.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if abs := math.Abs(f); abs == 0 || abs >= 1e-6 && abs < 1e21 {
		return strconv.AppendFloat(b, f, 'f', -1, 64), nil
	}
	return envelope.AppendJSON(b, f)
}

// Close writes the records kept and closes the file; later Writes fail
// with ErrClosed.
func (l *AuditLog) Close() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	l.timer.Stop()
	f, recs, err := l.f, l.recs, l.failed
	l.f, l.recs, l.spare, l.failed = nil, nil, nil, nil
	if len(recs) > 0 {
		if werr := l.writeBatch(f, recs); err == nil {
			err = werr
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
