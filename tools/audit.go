package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
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

// AuditSink receives every record after it was written to the log (the
// service publishes them on the bus). Audit must not block for long.
type AuditSink interface {
	Audit(ctx context.Context, r Record)
}

// ArgsHash returns the hex SHA-256 of the canonical JSON of args: encoding/json
// writes map keys sorted, so equal arguments hash equally.
func ArgsHash(args map[string]any) string {
	if args == nil {
		args = map[string]any{}
	}
	b, err := json.Marshal(args)
	if err != nil {
		b = []byte(fmt.Sprintf("unencodable: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// AuditLog appends records as JSON lines to a file opened O_APPEND. It is
// safe for concurrent use; Close closes the file.
type AuditLog struct {
	mu sync.Mutex
	f  *os.File
}

// OpenAuditLog opens (creating it and its directory) the JSONL file at path.
func OpenAuditLog(path string) (*AuditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("audit log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return &AuditLog{f: f}, nil
}

// lineBufs are the buffers records are encoded into, reused across writes.
var lineBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Write appends one record as one line, in one write.
func (l *AuditLog) Write(r *Record) error {
	buf := lineBufs.Get().(*bytes.Buffer)
	defer lineBufs.Put(buf)
	buf.Reset()
	// Encode writes what json.Marshal does, and the newline.
	if err := json.NewEncoder(buf).Encode(r); err != nil {
		return fmt.Errorf("encode audit record %s: %w", r.ID, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("audit record %s: %w", r.ID, ErrClosed)
	}
	if _, err := l.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write audit record %s: %w", r.ID, err)
	}
	return nil
}

// Close closes the file.
func (l *AuditLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
