package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// Protocol negotiation (docs/protocol.md).
//
// An entry without "protocolVersion" is negotiated: the SDK first sends
// server/discover at 2026-07-28 and, when the server does not speak it,
// falls back to the initialize handshake at 2025-11-25, which the server
// answers with the best version it speaks (2025-11-25, 2025-06-18,
// 2025-03-26). Some stdio servers end the session on the unknown
// server/discover instead of answering it: the runner then starts the
// server again and goes straight to initialize. An entry that pins a
// version asks for that version only and fails when the server answers
// another.

// MetaKeys of the SEP-2575 per-request triple.
const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// ErrVersionMismatch: the server answered another protocol version than the
// one the entry pins.
var ErrVersionMismatch = errors.New("protocol version mismatch")

// dial opens a session to s with client, negotiating the protocol version
// unless s pins one.
func dial(ctx context.Context, r *Runner, s mcpconfig.Server, client *mcp.Client, log *slog.Logger) (*mcp.ClientSession, *stdioProc, error) {
	if s.ProtocolVersion != "" {
		session, cmd, err := dialAt(ctx, r, s, client, log, s.ProtocolVersion)
		if err != nil {
			return nil, nil, err
		}
		if got := session.InitializeResult().ProtocolVersion; got != s.ProtocolVersion {
			_ = session.Close()
			return nil, nil, fmt.Errorf("%w: the server speaks %s, the entry pins %q (remove \"protocolVersion\" to negotiate)",
				ErrVersionMismatch, got, s.ProtocolVersion)
		}
		return session, cmd, nil
	}
	session, cmd, err := dialAt(ctx, r, s, client, log, mcpconfig.LatestProtocolVersion)
	if err == nil || ctx.Err() != nil || !endedOnDiscover(s, err) {
		return session, cmd, err
	}
	log.Info("server ended the session on server/discover; starting it again with the initialize handshake",
		"err", err, "protocol", mcpconfig.DefaultProtocolVersion)
	return dialAt(ctx, r, s, client, log, mcpconfig.DefaultProtocolVersion)
}

// endedOnDiscover reports whether a failed 2026-07-28 handshake of s looks
// like a stdio server that exited on server/discover (a remote server is
// not started again: the SDK falls back on its answer).
func endedOnDiscover(s mcpconfig.Server, err error) bool {
	if s.Type != mcpconfig.Stdio {
		return false
	}
	return errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, os.ErrClosed) || strings.Contains(err.Error(), "closed")
}

// negotiated reports whether session speaks 2026-07-28 or later.
func negotiated(session *mcp.ClientSession) bool {
	init := session.InitializeResult()
	return init != nil && init.ProtocolVersion >= mcpconfig.LatestProtocolVersion
}

// requestMeta is a sending middleware that gives every request of a
// 2026-07-28 session the _meta triple (protocol version, client info,
// capabilities). The SDK adds it to the requests it knows (tools/call,
// tools/list, …) but not to ping; the triple is the one the SDK sent with
// server/discover, so both always agree.
func requestMeta() mcp.Middleware {
	var mu sync.Mutex
	var triple map[string]any
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			p := req.GetParams()
			if p == nil || isNilParams(p) || strings.HasPrefix(method, "notifications/") {
				return next(ctx, method, req)
			}
			if method == "server/discover" {
				m := p.GetMeta()
				mu.Lock()
				triple = map[string]any{}
				for _, k := range []string{metaProtocolVersion, metaClientInfo, metaClientCapabilities} {
					if v, ok := m[k]; ok {
						triple[k] = v
					}
				}
				mu.Unlock()
				return next(ctx, method, req)
			}
			m := p.GetMeta()
			if m == nil {
				m = map[string]any{}
			}
			if tp := traceparent(ctx); tp != "" {
				if _, set := m["traceparent"]; !set {
					m["traceparent"] = tp // SEP-414: the server's spans join the relay's trace
					p.SetMeta(m)
				}
			}
			cs, ok := req.GetSession().(*mcp.ClientSession)
			if !ok || !negotiated(cs) {
				return next(ctx, method, req)
			}
			mu.Lock()
			for k, v := range triple {
				if _, set := m[k]; !set {
					m[k] = v
				}
			}
			mu.Unlock()
			// The version is the session's (discover may have been retried
			// at another one).
			m[metaProtocolVersion] = cs.InitializeResult().ProtocolVersion
			p.SetMeta(m)
			return next(ctx, method, req)
		}
	}
}

// traceparent is the W3C traceparent of the span in ctx, "" without one.
func traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// isNilParams reports whether p is a typed nil (a request sent with nil
// params).
func isNilParams(p mcp.Params) bool {
	switch v := p.(type) {
	case *mcp.PingParams:
		return v == nil
	}
	return false
}

// ping checks that session's server answers. It always sends params, so a
// 2026-07-28 ping carries its _meta (requestMeta); at 2026-07-28, where
// ping is no longer part of the protocol, "method not found" is an answer
// too: the server is up.
func ping(ctx context.Context, session *mcp.ClientSession) error {
	err := session.Ping(ctx, &mcp.PingParams{})
	var we *jsonrpc.Error
	if err != nil && negotiated(session) && errors.As(err, &we) && we.Code == jsonrpc.CodeMethodNotFound {
		return nil
	}
	return err
}
