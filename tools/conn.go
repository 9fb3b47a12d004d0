package tools

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
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
	StateReady    = "ready"    // session up, breaker closed, last check passed
	StateDegraded = "degraded" // session up, but checks fail or the breaker is not closed
	StateOffline  = "offline"  // no session
	StateDisabled = "disabled" // not run: configuration, operator or health checks
)

// conn owns one server: its session (one, long-lived), health loop, circuit
// breaker and tool cache.
type conn struct {
	r   *Runner
	cfg mcpconfig.Server
	log *slog.Logger

	wake chan struct{} // check now (enabled, or asked)
	lost chan struct{} // the session ended

	mu            sync.Mutex
	session       *mcp.ClientSession
	cmd           *exec.Cmd
	breaker       *gobreaker.TwoStepCircuitBreaker[struct{}]
	disabled      bool
	disabledWhy   string
	disabledBy    string
	checkFailing  bool
	failures      int
	lastErr       string
	lastCheck     time.Time
	handshake     time.Duration
	init          *mcp.InitializeResult
	breakerOpened int

	fatal atomic.Bool // the next breaker failure trips it at once

	calls calls // tool calls in flight, for elicitation and sampling

	toolsMu sync.Mutex // serialises tool list fetches
	cacheMu sync.Mutex
	tools   map[string]*toolEntry
	toolSeq []*toolEntry
	fetched time.Time
	ttl     time.Duration
}

func newConn(r *Runner, s mcpconfig.Server) *conn {
	c := &conn{
		r:    r,
		cfg:  s,
		log:  r.log.With("server", s.Name),
		wake: make(chan struct{}, 1),
		lost: make(chan struct{}, 1),
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

// run is the health loop: connect, ping every interval, retry with backoff,
// auto-disable when every retry failed. It returns when ctx is done.
func (c *conn) run(ctx context.Context) {
	cfg := &c.r.cfg
	failures := 0
	delay := time.Duration(0)
	for {
		t := time.NewTimer(delay)
		var err error
		checked := true
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-c.wake:
		case <-c.lost:
			checked = false
			err = ErrConnection
		}
		t.Stop()
		if c.isDisabled() {
			failures = 0
			delay = cfg.HealthInterval
			continue
		}
		if checked {
			err = c.check(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			c.setHealth(0, nil)
			delay = cfg.HealthInterval
			continue
		}
		failures++
		c.setHealth(failures, err)
		if failures > len(cfg.HealthBackoff) {
			c.r.autoDisable(ctx, c, failures, err)
			failures = 0
			delay = cfg.HealthInterval
			continue
		}
		delay = cfg.HealthBackoff[failures-1]
		c.log.Warn("health check failed; retrying", "failures", failures, "retry_in", delay, "err", err)
	}
}

func (c *conn) setHealth(failures int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = failures
	c.checkFailing = err != nil
	c.lastCheck = time.Now()
	if err != nil {
		c.lastErr = err.Error()
	} else {
		c.lastErr = ""
	}
}

// check connects when there is no session, pings otherwise. A failed ping
// closes the session so the next check reconnects.
func (c *conn) check(ctx context.Context) error {
	c.mu.Lock()
	s := c.session
	c.mu.Unlock()
	if s == nil {
		return c.connect(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, c.r.cfg.PingTimeout)
	defer cancel()
	if err := s.Ping(pctx, nil); err != nil {
		c.dropSession(s)
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// connect opens the server's one session.
func (c *conn) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, c.r.cfg.ConnectTimeout)
	defer cancel()
	start := time.Now()
	session, cmd, err := dial(cctx, c.r, c.cfg, c.client(), c.log)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	hs := time.Since(start)
	c.r.metrics.handshake.WithLabelValues(c.cfg.Name).Observe(hs.Seconds())
	c.mu.Lock()
	if c.disabled || c.r.closing.Load() {
		c.mu.Unlock()
		_ = session.Close()
		return nil
	}
	c.session, c.cmd, c.handshake, c.init = session, cmd, hs, session.InitializeResult()
	c.breaker = c.newBreaker() // a new session starts with a closed breaker
	c.mu.Unlock()
	c.r.metrics.up.WithLabelValues(c.cfg.Name).Set(1)
	c.r.metrics.breaker.WithLabelValues(c.cfg.Name).Set(0)
	c.invalidateTools()
	if _, err := c.cachedTools(ctx); err != nil {
		c.log.Warn("list tools after connect", "err", err)
	}
	c.log.Info("mcp session ready", "handshake", hs.Round(time.Microsecond).String(),
		"protocol", session.InitializeResult().ProtocolVersion)
	go func() {
		_ = session.Wait()
		c.mu.Lock()
		current := c.session == session
		if current {
			c.session, c.cmd = nil, nil
		}
		c.mu.Unlock()
		if current {
			c.r.metrics.up.WithLabelValues(c.cfg.Name).Set(0)
			c.log.Warn("mcp session ended")
			c.signal(c.lost)
		}
	}()
	return nil
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
	})
	cl.AddSendingMiddleware(c.trackCalls)
	return cl
}

// dial opens a session to s with a fresh client.
func dial(ctx context.Context, r *Runner, s mcpconfig.Server, client *mcp.Client, log *slog.Logger) (*mcp.ClientSession, *exec.Cmd, error) {
	var (
		t   mcp.Transport
		cmd *exec.Cmd
	)
	switch s.Type {
	case mcpconfig.Stdio:
		cmd = exec.Command(s.Command, s.Args...)
		cmd.Env = stdioEnv(r.cfg.BaseEnv, s.Env)
		cmd.Dir = s.Dir
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, nil, err
		}
		go logStderr(stderr, log)
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: r.cfg.TerminateDuration}
	case mcpconfig.HTTP:
		t = &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: httpClient(r.cfg.HTTPClient, s.Headers), MaxRetries: -1}
	case mcpconfig.SSE:
		t = &mcp.SSEClientTransport{Endpoint: s.URL, HTTPClient: httpClient(r.cfg.HTTPClient, s.Headers)}
	default:
		return nil, nil, fmt.Errorf("server %s: unknown transport %q", s.Name, s.Type)
	}
	session, err := client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: s.ProtocolVersion})
	if err != nil {
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		return nil, nil, err
	}
	return session, cmd, nil
}

// logStderr copies a stdio server's stderr to the log, line by line.
func logStderr(r io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	for sc.Scan() {
		log.Info("server stderr", "line", sc.Text())
	}
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
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
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

type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	return h.base.RoundTrip(req)
}

func httpClient(base *http.Client, headers map[string]string) *http.Client {
	if base == nil {
		base = http.DefaultClient
	}
	if len(headers) == 0 {
		return base
	}
	c := *base
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c.Transport = &headerTransport{base: rt, headers: headers}
	return &c
}

func (c *conn) isDisabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.disabled
}

// disable stops the server: the session is closed and calls fail with ErrDisabled.
func (c *conn) disable(reason, by string) {
	c.mu.Lock()
	was := c.disabled
	c.disabled, c.disabledWhy, c.disabledBy = true, reason, by
	s := c.session
	c.session, c.cmd = nil, nil
	c.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
	c.r.metrics.up.WithLabelValues(c.cfg.Name).Set(0)
	if !was {
		c.log.Warn("server disabled", "reason", reason, "by", by)
	}
}

// enable lets the server run again; the failure count restarts at zero.
func (c *conn) enable() {
	c.mu.Lock()
	was := c.disabled
	c.disabled, c.disabledWhy, c.disabledBy = false, "", ""
	c.failures, c.checkFailing, c.lastErr = 0, false, ""
	c.mu.Unlock()
	if was {
		c.log.Info("server enabled")
		c.signal(c.wake)
	}
}

// acquire returns the session and the breaker's completion function, or
// ErrOffline / ErrBreakerOpen without sending anything.
func (c *conn) acquire() (*mcp.ClientSession, func(bool), error) {
	c.mu.Lock()
	s, b := c.session, c.breaker
	c.mu.Unlock()
	if s == nil {
		return nil, nil, ErrOffline
	}
	done, err := b.Allow()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrBreakerOpen, err)
	}
	return s, func(ok bool) {
		if ok {
			done(nil)
		} else {
			done(errBreakerFailure)
		}
	}, nil
}

// status reports the server's state.
func (c *conn) status() ServerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := ServerStatus{
		Name:          c.cfg.Name,
		Type:          string(c.cfg.Type),
		Description:   c.cfg.Description,
		Failures:      c.failures,
		LastError:     c.lastErr,
		LastCheck:     c.lastCheck,
		Handshake:     c.handshake,
		Breaker:       c.breaker.State().String(),
		BreakerOpened: c.breakerOpened,
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
	case c.session == nil:
		st.State = StateOffline
	case c.checkFailing || c.breaker.State() != gobreaker.StateClosed:
		st.State = StateDegraded
	default:
		st.State = StateReady
	}
	c.cacheMu.Lock()
	st.Tools = len(c.toolSeq)
	for _, e := range c.toolSeq {
		st.ToolNames = append(st.ToolNames, e.info.Tool)
	}
	c.cacheMu.Unlock()
	return st
}

// close ends the session (and a stdio server's process).
func (c *conn) close() {
	c.mu.Lock()
	s := c.session
	c.session, c.cmd = nil, nil
	c.mu.Unlock()
	if s != nil {
		_ = s.Close()
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
func (c *conn) classify(ctx context.Context, err error, done func(bool)) error {
	var we *wireError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		// A timeout counts against the server; a caller's cancel does not.
		done(false)
		return ctxErr(ctx)
	case ctx.Err() != nil:
		done(true)
		return ctxErr(ctx)
	case errors.As(err, &we):
		done(true) // the server answered
		msg, _ := c.r.redactor.String(we.Message)
		return &ToolError{Code: we.Code, Message: msg}
	case errors.Is(err, mcp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, os.ErrClosed):
		c.fatal.Store(true)
		done(false)
		return fmt.Errorf("%w: %w", ErrConnection, err)
	default:
		done(false)
		return fmt.Errorf("%w: %w", ErrConnection, err)
	}
}
