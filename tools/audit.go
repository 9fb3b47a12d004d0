package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	// RunID correlates the records of one run: the task, the Slack message
	// of a code block, the CLI invocation.
	RunID string `json:"run_id"`
	// CallID is the id of the tool-call envelope (empty for CLI calls).
	CallID string `json:"call_id,omitempty"`
	TaskID string `json:"task_id,omitempty"`
	Thread string `json:"thread,omitempty"`
	// AgentID and Role are the caller's ("cli" for `relay mcp call`).
	AgentID string `json:"agent_id,omitempty"`
	// Actor is who the call ran for (a person, the agent, "cli:<user>").
	Actor  string `json:"actor,omitempty"`
	Role   string `json:"role,omitempty"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
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
	return hex.EncodeToString(sum[:])
}

// hashBufs hold the arguments' JSON while it is hashed.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledBuf is the largest buffer kept for reuse: one huge argument or
// record does not pin its memory.
const maxPooledBuf = 64 << 10

// AuditLog appends records as JSON lines to a file opened O_APPEND. It is
// safe for concurrent use.
//
// Write buffers the line and returns; the lines reach the file in the
// order Write took them, in one write(2) per batch: AuditFlushDelay after
// the first line of a batch, at once when a batch passes auditFlushBytes
// (that Write writes it), on Flush and on Close. A clean shutdown (Close)
// loses nothing; a crash of the process (SIGKILL, an unrecovered panic, the
// machine) loses the lines of the last AuditFlushDelay at most. As before,
// nothing is fsynced: a crash of the machine can also lose what the kernel
// had not stored yet.
type AuditLog struct {
	mu      sync.Mutex
	f       *os.File
	buf     []byte // lines not written yet, guarded by mu
	lines   int    // how many, guarded by mu
	armed   bool   // the timer will flush buf, guarded by mu
	timer   *time.Timer
	failed  error // a background flush's error, for the next Flush or Close; guarded by mu
	onError func(err error, lines int)

	// writeMu is held while a batch is written: batches reach the file in
	// the order they were taken.
	writeMu sync.Mutex
	spare   []byte // a written batch's buffer, reused; guarded by mu
}

// AuditFlushDelay bounds how long a record waits in an AuditLog's buffer
// before it is written: what a crash of the process can lose.
const AuditFlushDelay = 10 * time.Millisecond

// auditFlushBytes is the size at which a batch is written at once, by the
// Write that filled it.
const auditFlushBytes = 256 << 10

// OpenAuditLog opens (creating it and its directory) the JSONL file at path.
func OpenAuditLog(path string) (*AuditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("audit log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	l := &AuditLog{f: f}
	l.timer = time.AfterFunc(time.Hour, l.flushLater)
	l.timer.Stop()
	return l, nil
}

// OnError sets what is told when a batch written in the background fails
// (lines is how many records it held); that error is also returned by the
// next Flush or Close. Set it before the first Write.
func (l *AuditLog) OnError(fn func(err error, lines int)) { l.onError = fn }

// lineBufs are the buffers records are encoded into, reused across writes.
var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Write appends one record as one line. The line is in the file within
// AuditFlushDelay, or when Flush or Close returns.
func (l *AuditLog) Write(r *Record) error {
	bp := lineBufs.Get().(*[]byte)
	line, err := r.appendJSON((*bp)[:0])
	if err != nil {
		return fmt.Errorf("encode audit record %s: %w", r.ID, err)
	}
	line = append(line, '\n')
	defer func() {
		if cap(line) <= maxPooledBuf {
			*bp = line[:0]
			lineBufs.Put(bp)
		}
	}()
	l.mu.Lock()
	if l.f == nil {
		l.mu.Unlock()
		return fmt.Errorf("audit record %s: %w", r.ID, ErrClosed)
	}
	l.buf = append(l.buf, line...)
	l.lines++
	full := len(l.buf) >= auditFlushBytes
	if !full && !l.armed {
		l.armed = true
		l.timer.Reset(AuditFlushDelay)
	}
	l.mu.Unlock()
	if full {
		if _, err := l.flush(); err != nil {
			return fmt.Errorf("write audit record %s: %w", r.ID, err)
		}
	}
	return nil
}

// Flush writes the buffered records and returns the first error since the
// last Flush (its own or a background flush's).
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
	if err == nil {
		return
	}
	l.mu.Lock()
	if l.failed == nil {
		l.failed = err
	}
	l.mu.Unlock()
	if l.onError != nil {
		l.onError(err, n)
	}
}

// flush writes the buffered lines in one write and reports how many
// records they held.
func (l *AuditLog) flush() (int, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	b, n, f := l.buf, l.lines, l.f
	l.buf, l.lines, l.spare, l.armed = l.spare[:0], 0, nil, false
	l.mu.Unlock()
	if len(b) == 0 {
		return 0, nil
	}
	var err error
	if f == nil {
		err = ErrClosed
	} else if _, err = f.Write(b); err != nil {
		err = fmt.Errorf("write %d audit records: %w", n, err)
	}
	if cap(b) <= maxPooledBuf {
		l.mu.Lock()
		l.spare = b[:0]
		l.mu.Unlock()
	}
	return n, err
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

// Close writes the buffered records and closes the file; later Writes
// fail with ErrClosed.
func (l *AuditLog) Close() error {
	l.mu.Lock()
	if l.f == nil {
		l.mu.Unlock()
		return nil
	}
	l.timer.Stop()
	l.mu.Unlock()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	f, b, failed := l.f, l.buf, l.failed
	l.f, l.buf, l.lines, l.spare, l.failed = nil, nil, 0, nil, nil
	err := failed
	if len(b) > 0 {
		if _, werr := f.Write(b); werr != nil && err == nil {
			err = fmt.Errorf("write audit records: %w", werr)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
