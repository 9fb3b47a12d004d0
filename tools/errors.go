package tools

import (
	"errors"
	"fmt"
)

// Status is the outcome of one invocation, as the audit log records it.
type Status string

// The statuses of an invocation.
const (
	StatusSuccess          Status = "success"
	StatusError            Status = "error"
	StatusPermissionDenied Status = "permission_denied"
	StatusRateLimited      Status = "rate_limited"
	StatusTimeout          Status = "timeout"
	StatusCancelled        Status = "cancelled"
	StatusDisabled         Status = "disabled"
	// StatusLimitExceeded: the per-thread session limit or the global
	// concurrency limit refused the execution.
	StatusLimitExceeded Status = "limit_exceeded"
)

// Errors of a call; test with errors.Is. Each maps to one Status (see StatusOf).
var (
	// ErrPermissionDenied: the caller's role lacks the capability.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrRateLimited: the budget's requests per second would be exceeded
	// within the call's timeout.
	ErrRateLimited = errors.New("rate limited")
	// ErrQuotaExhausted: the budget's daily quota is used up (status rate_limited).
	ErrQuotaExhausted = fmt.Errorf("%w: daily quota exhausted", ErrRateLimited)
	// ErrLimitExceeded: the thread's session limit is reached, or every
	// global execution slot stayed taken until the call's deadline.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrStopped: the stop switch blocks new executions (status disabled).
	ErrStopped = errors.New("tool execution stopped by the stop switch")
	// ErrDisabled: the server is disabled (by configuration, an operator or
	// the health checks).
	ErrDisabled = errors.New("server disabled")
	// ErrUnknownServer and ErrUnknownTool: no such server in mcp.json, no such
	// tool on the server.
	ErrUnknownServer = errors.New("unknown server")
	ErrUnknownTool   = errors.New("unknown tool")
	// ErrOffline: the server has no session right now; the call was not sent.
	ErrOffline = errors.New("server offline")
	// ErrBreakerOpen: the server's circuit breaker fails calls fast; not sent.
	ErrBreakerOpen = errors.New("circuit breaker open")
	// ErrInvalidArguments: the arguments break the tool's inputSchema; not sent.
	ErrInvalidArguments = errors.New("invalid arguments")
	// ErrInvalidOutput: structuredContent breaks the tool's outputSchema.
	ErrInvalidOutput = errors.New("structured content does not match the output schema")
	// ErrToolFailed: the tool answered isError or the server a JSON-RPC error.
	ErrToolFailed = errors.New("tool failed")
	// ErrConnection: the session broke during the call (the server may have
	// received it).
	ErrConnection = errors.New("connection lost")
	// ErrTimeout: the call's budget timeout passed; the server was sent
	// notifications/cancelled.
	ErrTimeout = errors.New("timeout")
	// ErrCancelled: the caller cancelled; the server was sent notifications/cancelled.
	ErrCancelled = errors.New("cancelled")
	// ErrClosed: the runner is closed.
	ErrClosed = errors.New("tool runner closed")
)

// CallError is the error of a failed call: the tool and why.
type CallError struct {
	Server, Tool string
	Status       Status
	Err          error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("call %s.%s: %v", e.Server, e.Tool, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// ToolError carries what a tool said when it failed (isError content or a
// JSON-RPC error message, already redacted).
type ToolError struct {
	Code    int64 // JSON-RPC error code; 0 for an isError result
	Message string
}

func (e *ToolError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("%s: json-rpc error %d: %s", ErrToolFailed, e.Code, e.Message)
	}
	return fmt.Sprintf("%s: %s", ErrToolFailed, e.Message)
}

func (e *ToolError) Unwrap() error { return ErrToolFailed }

// StatusOf maps an error to the audit status.
func StatusOf(err error) Status {
	switch {
	case err == nil:
		return StatusSuccess
	case errors.Is(err, ErrPermissionDenied):
		return StatusPermissionDenied
	case errors.Is(err, ErrLimitExceeded):
		return StatusLimitExceeded
	case errors.Is(err, ErrRateLimited):
		return StatusRateLimited
	case errors.Is(err, ErrTimeout):
		return StatusTimeout
	case errors.Is(err, ErrCancelled):
		return StatusCancelled
	case errors.Is(err, ErrStopped), errors.Is(err, ErrDisabled):
		return StatusDisabled
	}
	return StatusError
}
