package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sony/gobreaker/v2"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// errBreakerFailure is what a failed call reports to its breaker.
var errBreakerFailure = errors.New("breaker: failure")

// ServerStatus values.
const (
	StateConnecting = "connecting" // a handshake is under way and there is no session yet
	StateReady      = "ready"      // session up, breaker closed, no failed check since the last good ping
	StateDegraded   = "degraded"   // session up, but a check failed since the last good ping or the breaker is not closed
	StateOffline    = "offline"    // no session; the next retry is scheduled
	StateDisabled   = "disabled"   // not run: configuration, operator or health checks
)

// conn owns one server: its session (one, long-lived), health loop, circuit
// breaker and tool cache.
type conn struct {
	r   *Runner
	cfg mcpconfig.Server
	log *slog.Logger
	// redactor removes the runner's secrets and this server's own (values
	// from ${input:…} and ${env:…}, secret-named env entries).
	redactor *Redactor

	wake chan struct{} // check now (enabled, or asked)
	lost chan struct{} // the session ended

	// busy counts the calls in flight (Runner.acquire), so a server Reload
	// removed is stopped after they finish.
	busy atomic.Int64

	// principal is the person of a per-person connection (peruser.go),
	// whose grant its session carries; "" for a server's own conn. users
	// are a per-user server's per-person connections; dialMu serialises a
	// per-person connection's connects.
	principal string
	users     userConns
	dialMu    sync.Mutex

	mu            sync.Mutex
	session       *mcp.ClientSession
	side          *sideConn // a stdio session's connection (taskwire.go)
	cmd           *stdioProc
	breaker       *gobreaker.TwoStepCircuitBreaker[struct{}]
	disabled      bool
	disabledWhy   string
	disabledBy    string
	health        health
	handshake     time.Duration
	init          *mcp.InitializeResult
	breakerOpened int
	calls         callStats

	fatal atomic.Bool // the next breaker failure trips it at once

	inflight calls // tool calls in flight, for elicitation and sampling

	// asks are the server requests being answered (a question to a human,
	// a sampling request), cancelled when the server is disabled or closed:
	// closing a session waits for them, and nothing may hold a switch.
	asksMu  sync.Mutex
	asks    map[uint64]context.CancelCauseFunc
	asksSeq uint64

	toolsMu sync.Mutex // serialises tool list fetches
	cacheMu sync.Mutex
	tools   map[string]*toolEntry
	toolSeq []*toolEntry
	fetched time.Time // of the list, while it may be served; zero once invalidated
	listed  time.Time // of the list in toolSeq, kept when it is invalidated
	ttl     time.Duration
	gen     uint64 // bumped by invalidateTools: a fetch begun before is stale
}

func newConn(r *Runner, s mcpconfig.Server) *conn {
	c := &conn{
		r:    r,
		cfg:  s,
		log:  r.log.With("server", s.Name),
		wake: make(chan struct{}, 1),
		lost: make(chan struct{}, 1),

		redactor: r.redactor.With(s.Secrets...),
	}
	c.disabled = s.Disabled
	if s.Disabled {
		c.disabledWhy, c.disabledBy = s.Description, "config"
		if c.disabledWhy == "" {
			c.disabledWhy = "disabled in mcp.json"
		}
	}
	c.breaker = c.newBreaker()
	return c
}

func (c *conn) newBreaker() *gobreaker.TwoStepCircuitBreaker[struct{}] {
	threshold := uint32(c.r.cfg.BreakerFailures)
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        c.cfg.Name,
		MaxRequests: 1,
		Timeout:     c.r.cfg.BreakerOpen,
		ReadyToTrip: func(n gobreaker.Counts) bool {
			return c.fatal.Swap(false) || n.ConsecutiveFailures >= threshold
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			c.r.metrics.breaker.WithLabelValues(c.cfg.Name).Set(float64(to))
			if to == gobreaker.StateOpen {
				c.mu.Lock()
				c.breakerOpened++
				c.mu.Unlock()
			}
			c.log.Info("circuit breaker", "from", from.String(), "to", to.String())
		},
	})
}

func (c *conn) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// drain takes a pending signal off ch, if there is one.
func (c *conn) drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// dropSession closes s if it is still the current session.
func (c *conn) dropSession(s *mcp.ClientSession) {
	c.mu.Lock()
	if c.session == s {
		c.session, c.cmd = nil, nil
	}
	c.mu.Unlock()
	c.r.metrics.up.WithLabelValues(c.cfg.Name).Set(0)
	_ = s.Close()
}

// client builds the SDK client whose notifications reach this conn. It
// declares elicitation and sampling (elicit.go).
func (c *conn) client() *mcp.Client {
	cl := mcp.NewClient(&mcp.Implementation{Name: c.r.cfg.ClientName, Version: c.r.cfg.ClientVersion}, &mcp.ClientOptions{
		Logger:       c.r.cfg.SDKLogger,
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			c.log.Debug("tool list changed")
			c.invalidateTools()
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.r.progress.deliver(req.Params)
		},
		ElicitationHandler:   c.elicit,
		CreateMessageHandler: c.sample,
		// The runner answers input-required results itself, so that a
		// pending round is durable (rounds.go).
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	})
	cl.AddSendingMiddleware(c.trackCalls, requestMeta())
	return cl
}

// dialAt opens a session to s with client, asking for version (negotiate.go).
func dialAt(ctx context.Context, r *Runner, s mcpconfig.Server, client *mcp.Client, log *slog.Logger, version string) (*mcp.ClientSession, *stdioProc, error) {
	t, cmd, err := transport(r, s, log, principalFrom(ctx))
	if err != nil {
		return nil, nil, err
	}
	ctx, challenge := withChallengeSlot(ctx)
	session, err := client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		if lerr := loginError(r, s, principalFrom(ctx), challenge, err); lerr != nil {
			return nil, nil, lerr
		}
		return nil, nil, hint(s, handshakeError(r, t, err))
	}
	return session, cmd, nil
}

// stdioEnv is the child's environment: the base (never the relay's secrets
// unless an entry names them) plus the entry's env.
func stdioEnv(base []string, extra map[string]string) []string {
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := extra[k]; !over {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		out = append(out, k+"="+extra[k])
	}
	return out
}

// DefaultBaseEnv are the variables of the relay's environment passed to
// stdio servers (what a runtime such as node or python needs to start).
var DefaultBaseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR", "TEMP", "TMP",
	"NODE_PATH", "NODE_OPTIONS", "NPM_CONFIG_CACHE", "PYTHONPATH", "VIRTUAL_ENV", "SYSTEMROOT", "APPDATA", "LOCALAPPDATA",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}

// BaseEnvFrom picks DefaultBaseEnv's variables from environ ("NAME=value" pairs).
func BaseEnvFrom(environ []string) []string {
	want := map[string]bool{}
	for _, n := range DefaultBaseEnv {
		want[n] = true
	}
	var out []string
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); want[k] {
			out = append(out, kv)
		}
	}
	return out
}

func (c *conn) isDisabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.disabled
}

// disable stops the server: the session is closed and calls fail with
// ErrDisabled. It reports whether the server was enabled before.
func (c *conn) disable(reason, by string) bool {
	c.mu.Lock()
	was := c.disabled
	c.disabled, c.disabledWhy, c.disabledBy = true, reason, by
	if by == "health" && !was {
		c.health.autoDisabledAt = time.Now()
	}
	s := c.session
	c.session, c.cmd = nil, nil
	c.mu.Unlock()
	c.cancelAsks(fmt.Errorf("%w: %s was disabled (%s)", ErrDisabled, c.cfg.Name, reason))
	// The calls in flight end now too: a server that never answers
	// them (or never lets its session close) holds nothing.
	c.inflight.mu.Lock()
	running := slices.Clone(c.inflight.list)
	c.inflight.mu.Unlock()
	for _, f := range running {
		c.r.Cancel(f.run.id, "the disable of "+c.cfg.Name+" by "+by)
	}
	if s != nil {
		// Closing waits for the session's handlers and a stdio server's
		// exit; the caller (the state watcher, an operator's command) does
		// not.
		c.r.closeInBackground(s)
	}
	c.r.metrics.up.WithLabelValues(c.cfg.Name).Set(0)
	if !was {
		c.log.Warn("server disabled", "reason", reason, "by", by)
	}
	return !was
}

// enable lets the server run again; the failure count restarts at zero. It
// returns who had disabled it ("" when it was enabled already).
func (c *conn) enable() (wasDisabledBy string) {
	c.mu.Lock()
	was, by := c.disabled, c.disabledBy
	c.disabled, c.disabledWhy, c.disabledBy = false, "", ""
	c.health.failures, c.health.lastErr, c.health.nextRetry, c.health.autoDisabledAt = 0, "", time.Time{}, time.Time{}
	c.mu.Unlock()
	if !was {
		return ""
	}
	c.log.Info("server enabled")
	c.signal(c.wake)
	return by
}

// acquire returns the session, a stdio server's process, and the breaker's completion function (nil
// for a call the server answered, errBreakerFailure for one that counts
// against it), or ErrOffline / ErrBreakerOpen without sending anything.
func (c *conn) acquire() (*mcp.ClientSession, *stdioProc, func(error), error) {
	c.mu.Lock()
	s, p, b := c.session, c.cmd, c.breaker
	c.mu.Unlock()
	if s == nil {
		return nil, nil, nil, c.offline()
	}
	done, err := b.Allow()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrBreakerOpen, err)
	}
	return s, p, done, nil
}

// status reports the server's state.
func (c *conn) status() ServerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := &c.health
	st := ServerStatus{
		Name:           c.cfg.Name,
		DisplayName:    c.cfg.DisplayName,
		Type:           string(c.cfg.Type),
		Description:    c.cfg.Description,
		Capabilities:   c.cfg.Capabilities,
		SchemaVersion:  c.cfg.SchemaVersion,
		Failures:       h.failures,
		LastError:      h.lastErr,
		LastCheck:      h.lastCheck,
		LastConnected:  h.lastConnected,
		LastPing:       h.lastPing,
		PingLatency:    h.pingLatency,
		NextRetry:      h.nextRetry,
		AutoDisabledAt: h.autoDisabledAt,
		Handshake:      c.handshake,
		Breaker:        c.breaker.State().String(),
		BreakerOpened:  c.breakerOpened,
		Invocations:    c.calls.invocations,
		Successes:      c.calls.successes,
		Errors:         c.calls.errors,
		LastInvocation: c.calls.last,
		AvgLatency:     c.calls.avg(),
	}
	if c.init != nil {
		st.ProtocolVersion = c.init.ProtocolVersion
		if c.init.ServerInfo != nil {
			st.ServerName, st.ServerVersion = c.init.ServerInfo.Name, c.init.ServerInfo.Version
		}
	}
	switch {
	case c.disabled:
		st.State, st.DisabledReason, st.DisabledBy = StateDisabled, c.disabledWhy, c.disabledBy
	case c.session == nil && h.needsLogin:
		st.State = StateNeedsLogin
	case c.session == nil && h.connecting:
		st.State = StateConnecting
	case c.session == nil:
		st.State = StateOffline
	case h.failures > 0 || c.breaker.State() != gobreaker.StateClosed:
		st.State = StateDegraded
	default:
		st.State = StateReady
	}
	c.cacheMu.Lock()
	st.Tools, st.ToolsListed = len(c.toolSeq), c.listed
	for _, e := range c.toolSeq {
		st.ToolNames = append(st.ToolNames, e.info.Tool)
	}
	c.cacheMu.Unlock()
	return st
}

// close ends the session (and a stdio server's process) and the
// per-person sessions.
func (c *conn) close() {
	c.closeUsers()
	c.mu.Lock()
	s := c.session
	c.session, c.cmd = nil, nil
	c.mu.Unlock()
	c.cancelAsks(ErrClosed)
	if s != nil {
		_ = s.Close()
	}
}

// hold registers cancel, the cancel of a server request being answered,
// until release; a request arriving on a disabled server is cancelled at
// once.
func (c *conn) hold(cancel context.CancelCauseFunc) (release func()) {
	c.asksMu.Lock()
	if c.asks == nil {
		c.asks = map[uint64]context.CancelCauseFunc{}
	}
	c.asksSeq++
	id := c.asksSeq
	c.asks[id] = cancel
	c.asksMu.Unlock()
	if c.isDisabled() {
		cancel(fmt.Errorf("%w: %s", ErrDisabled, c.cfg.Name))
	}
	return func() {
		c.asksMu.Lock()
		delete(c.asks, id)
		c.asksMu.Unlock()
	}
}

// cancelAsks cancels every server request being answered, with cause.
func (c *conn) cancelAsks(cause error) {
	c.asksMu.Lock()
	defer c.asksMu.Unlock()
	for _, cancel := range c.asks {
		cancel(cause)
	}
}

// pid is the stdio server's process id, 0 when none (tests kill it).
func (c *conn) pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// classify maps a CallTool error to the call's error and tells the breaker.
func (c *conn) classify(ctx context.Context, err error, done func(error)) error {
	var we *wireError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		// A timeout counts against the server; a caller's cancel does not.
		done(errBreakerFailure)
		return ctxErr(ctx)
	case ctx.Err() != nil:
		done(nil)
		return ctxErr(ctx)
	case errors.Is(err, ErrNeedsLogin):
		done(nil) // not the server's failure: its login ended (oauth.go)
		c.loginLost(ctx, err)
		return err
	case sendLost(err):
		// The HTTP request broke before any answer began; the SDK calls
		// that "rejected by transport" and keeps the cause inside.
		c.fatal.Store(true)
		done(errBreakerFailure)
		msg, _ := c.redactor.String(err.Error())
		return fmt.Errorf("%w to server %s: %s", ErrConnection, c.cfg.Name, msg)
	case errors.As(err, &we):
		done(nil) // the server answered
		msg, _ := c.redactor.String(we.Message)
		return &ToolError{Code: we.Code, Message: msg}
	case closedConn(err) && c.loginEnded():
		// The health check found the login ended and closed the session
		// under this call: the login is the answer, not the server.
		done(nil)
		return c.offline()
	case closedConn(err):
		c.fatal.Store(true)
		done(errBreakerFailure)
		return fmt.Errorf("%w to server %s: %w", ErrConnection, c.cfg.Name, err)
	default:
		done(errBreakerFailure)
		return fmt.Errorf("%w to server %s: %w", ErrConnection, c.cfg.Name, err)
	}
}

// closedConn reports whether err is the session's end (closed, EOF).
func closedConn(err error) bool {
	return errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrClosed)
}

// loginEnded reports whether the server is in needs_login.
func (c *conn) loginEnded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health.needsLogin
}

// codeRejected is the JSON-RPC code of the SDK's "rejected by transport".
const codeRejected = -32005

// sendLost reports whether err is a request the HTTP client could not
// complete (the connection broke, was refused or reset): the SDK's
// "rejected by transport" with the HTTP client's error inside. A JSON-RPC
// error the server answered is found first and is not one.
func sendLost(err error) bool {
	var we *wireError
	var ue *url.Error
	return errors.As(err, &we) && we.Code == codeRejected && errors.As(err, &ue)
}
