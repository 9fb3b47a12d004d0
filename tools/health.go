package tools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// health is one server's health record, guarded by conn.mu.
type health struct {
	// connecting: a handshake is under way; attempted: the first connect
	// attempt has finished (either way).
	connecting, attempted bool
	// failures counts consecutive failed checks. A handshake that succeeds
	// does not reset it (a server that connects and then drops is failing);
	// a successful ping on an established session does.
	failures       int
	lastErr        string
	lastCheck      time.Time
	lastConnected  time.Time
	lastPing       time.Time
	pingLatency    time.Duration
	nextRetry      time.Time
	autoDisabledAt time.Time
	// needsLogin: the last connect met a Bearer challenge (StateNeedsLogin);
	// loginNoticed: its notice went out (once until a connect succeeds).
	needsLogin, loginNoticed bool
}

// run is the health loop: connect, ping every interval, retry failed
// checks after the backoff delays and auto-disable the server when
// DisableAfter consecutive checks failed. It returns when ctx is done.
func (c *conn) run(ctx context.Context) {
	delay := time.Duration(0)
	for {
		lost, ok := c.sleep(ctx, delay)
		if !ok {
			return
		}
		if c.isDisabled() {
			delay = c.r.cfg.HealthInterval
			continue
		}
		var err error
		pinged := false
		if lost {
			err = fmt.Errorf("%w: the session ended", ErrConnection)
		} else {
			pinged, err = c.check(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		delay = c.afterCheck(ctx, pinged, err)
	}
}

// sleep waits d, or until the server is woken or its session is lost
// (lost true). ok is false when ctx ended.
func (c *conn) sleep(ctx context.Context, d time.Duration) (lost, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C:
	case <-c.wake:
	case <-c.lost:
		return true, true
	}
	return false, true
}

// afterCheck records a check's outcome and returns the delay before the next.
func (c *conn) afterCheck(ctx context.Context, pinged bool, err error) time.Duration {
	cfg := &c.r.cfg
	now := time.Now()
	c.mu.Lock()
	h := &c.health
	h.lastCheck = now
	if err == nil {
		if pinged {
			h.failures = 0
		}
		h.lastErr, h.nextRetry = "", time.Time{}
		h.needsLogin, h.loginNoticed = false, false
		c.mu.Unlock()
		return cfg.HealthInterval
	}
	var lerr *NeedsLoginError
	if errors.As(err, &lerr) {
		// Not a failure: checked again at the health interval (a login made
		// meanwhile is picked up), never auto-disabled.
		h.needsLogin, h.lastErr, h.nextRetry = true, err.Error(), time.Time{}
		notify := !h.loginNoticed
		h.loginNoticed = true
		c.mu.Unlock()
		if notify {
			cmd := LoginCommand(c.cfg.Name)
			if PerUser(c.cfg) {
				cmd = ConnectCommand(c.cfg.Name) + " (each person, in Slack)"
			}
			c.log.Warn("server needs an OAuth login", "command", cmd)
			c.r.notify(ctx, Notice{Kind: NoticeNeedsLogin, Server: c.cfg.Name, Reason: err.Error(), At: now.UTC(), LastError: err.Error()})
		}
		return cfg.HealthInterval
	}
	h.needsLogin = false
	h.failures++
	h.lastErr = err.Error()
	failures := h.failures
	if failures >= cfg.DisableAfter {
		h.nextRetry = time.Time{}
		c.mu.Unlock()
		c.r.autoDisable(ctx, c, failures, err)
		return cfg.HealthInterval
	}
	d := cfg.HealthBackoff[min(failures-1, len(cfg.HealthBackoff)-1)]
	h.nextRetry = now.Add(d)
	c.mu.Unlock()
	c.log.Warn("health check failed; retrying", "failures", failures, "retry_in", d, "err", err)
	return d
}

// check connects when there is no session, pings otherwise (pinged true).
// A failed ping closes the session so the next check reconnects.
func (c *conn) check(ctx context.Context) (pinged bool, err error) {
	c.mu.Lock()
	s := c.session
	c.mu.Unlock()
	if s == nil {
		return false, c.connect(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, c.r.cfg.PingTimeout)
	defer cancel()
	start := time.Now()
	if err := ping(pctx, s); err != nil {
		var lerr *NeedsLoginError
		if errors.As(err, &lerr) {
			// Marked before the session closes: a call that the close
			// cuts short then reports the login, not a lost connection
			// (classify).
			c.mu.Lock()
			c.health.needsLogin, c.health.lastErr = true, err.Error()
			c.mu.Unlock()
		}
		c.dropSession(s)
		// This failure is counted now: an end-of-session signal that raced
		// with the ping would count it twice.
		c.drain(c.lost)
		return true, fmt.Errorf("ping: %w", err)
	}
	lat := time.Since(start)
	c.mu.Lock()
	c.health.lastPing, c.health.pingLatency = time.Now(), lat
	c.mu.Unlock()
	return true, nil
}

// connect opens the server's one session.
func (c *conn) connect(ctx context.Context) error {
	c.setConnecting(true)
	defer c.setConnecting(false)
	cctx, cancel := context.WithTimeout(ctx, c.r.cfg.ConnectTimeout)
	defer cancel()
	start := time.Now()
	cctx, slot := withSideSlot(cctx)
	session, cmd, err := dial(cctx, c.r, c.cfg, c.client(), c.log)
	if err != nil {
		if cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return fmt.Errorf("connect: handshake not finished within %s: %w", c.r.cfg.ConnectTimeout, err)
		}
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
	c.side = slot.get()
	c.health.lastConnected = time.Now()
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
	go c.watchSession(session)
	return nil
}

func (c *conn) setConnecting(on bool) {
	c.mu.Lock()
	c.health.connecting = on
	if !on {
		c.health.attempted = true
	}
	c.mu.Unlock()
}

// watchSession reports the end of session, when it is still the current one.
func (c *conn) watchSession(session *mcp.ClientSession) {
	err := session.Wait()
	c.mu.Lock()
	current := c.session == session
	if current {
		c.session, c.cmd = nil, nil
	}
	if current {
		// Under mu: a failed ping's dropSession either comes first (and
		// this session is not current) or sees the signal to drain.
		c.signal(c.lost)
	}
	c.mu.Unlock()
	if current {
		c.r.metrics.up.WithLabelValues(c.cfg.Name).Set(0)
		c.log.Warn("mcp session ended", "err", err)
	}
}

// firstAttemptDone reports whether the server is disabled or its first
// connect attempt has finished.
func (c *conn) firstAttemptDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.disabled || c.health.attempted
}
