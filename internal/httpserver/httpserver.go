// Package httpserver builds the relay's HTTP server: the echo instance every
// service mounts its routes on, with /healthz, /readyz and /metrics, which can
// move to a separate operations listener (RELAY_METRICS_ADDR) so that the
// public webhook listener serves webhooks only.
//
// Its listeners read ahead: a TCP connection reads up to ReadAhead bytes of
// what has arrived at once where net/http asks for 4 KiB, so a webhook of a
// few dozen kB takes one read system call instead of one per 4 KiB, and
// Arrived tells a handler how much of its request is already in. A buffer is
// held only while it has bytes the client sent; a connection waiting for
// data holds none.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports nil when a dependency is ready.
type Check func(ctx context.Context) error

// Server is an echo server with health, readiness and metrics routes. Add
// routes and checks before Serve.
type Server struct {
	// Echo carries the public routes (webhooks), and the operations routes
	// unless SeparateOps moved them.
	Echo *echo.Echo
	// Ops carries /healthz, /readyz and /metrics alone; ServeOps serves it.
	Ops      *echo.Echo
	log      *slog.Logger
	mu       sync.Mutex
	checks   map[string]Check
	liveness map[string]Check
	separate atomic.Bool
	held     atomic.Bool
}

// New returns a server exposing reg on /metrics.
func New(log *slog.Logger, reg *prometheus.Registry) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{Echo: newEcho(), Ops: newEcho(), log: log, checks: map[string]Check{}, liveness: map[string]Check{}}
	metrics := echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	for _, e := range []*echo.Echo{s.Echo, s.Ops} {
		public := e == s.Echo
		e.GET("/healthz", s.opsRoute(public, s.healthz))
		e.GET("/readyz", s.opsRoute(public, s.ready))
		e.GET("/metrics", s.opsRoute(public, metrics))
	}
	return s
}

func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	return e
}

// opsRoute serves h, on the public listener only while the operations routes
// have not moved to their own.
func (s *Server) opsRoute(public bool, h echo.HandlerFunc) echo.HandlerFunc {
	if !public {
		return h
	}
	return func(c echo.Context) error {
		if s.separate.Load() {
			return echo.ErrNotFound
		}
		return h(c)
	}
}

// SeparateOps moves /healthz, /readyz and /metrics off the public listener:
// from then on only ServeOps serves them.
func (s *Server) SeparateOps() { s.separate.Store(true) }

// Hold makes the public listener answer 503 (Retry-After: 1) to everything
// but the operations routes until Release, so a process serves its health
// endpoints while it waits for its dependencies and mounts its routes on Echo
// meanwhile (Echo must not change while it serves). Call it before serving.
func (s *Server) Hold() { s.held.Store(true) }

// Release ends Hold: the public listener serves Echo, with every route
// mounted before the call.
func (s *Server) Release() { s.held.Store(false) }

// public is the public listener's handler.
func (s *Server) public() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.held.Load() {
			s.Echo.ServeHTTP(w, r)
			return
		}
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			if !s.separate.Load() {
				s.Ops.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Retry-After", "1")
		http.Error(w, "starting, retry later", http.StatusServiceUnavailable)
	})
}

// AddCheck registers a readiness check under name.
func (s *Server) AddCheck(name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = c
}

// AddLiveness registers a liveness check under name: while it fails,
// /healthz answers 503 so that a supervisor restarts the process. Only a
// state the process cannot leave by itself belongs here (a connection given
// up for good), never a dependency that is merely down.
func (s *Server) AddLiveness(name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.liveness[name] = c
}

func (s *Server) healthz(c echo.Context) error {
	code, status := s.run(c.Request().Context(), s.liveness)
	if code == http.StatusOK {
		return c.String(http.StatusOK, "ok\n")
	}
	return c.JSON(code, status)
}

func (s *Server) ready(c echo.Context) error {
	code, status := s.run(c.Request().Context(), s.checks)
	if s.held.Load() {
		code, status["http"] = http.StatusServiceUnavailable, "starting"
	}
	return c.JSON(code, status)
}

// run runs the checks of one kind: 200 when all pass, else 503.
func (s *Server) run(ctx context.Context, of map[string]Check) (int, map[string]string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s.mu.Lock()
	checks := make(map[string]Check, len(of))
	for k, v := range of {
		checks[k] = v
	}
	s.mu.Unlock()
	status := map[string]string{}
	code := http.StatusOK
	for name, check := range checks {
		if err := check(ctx); err != nil {
			status[name] = err.Error()
			code = http.StatusServiceUnavailable
		} else {
			status[name] = "ok"
		}
	}
	return code, status
}

// Serve listens on addr and serves until ctx is cancelled, then shuts down
// gracefully. A taken address is reported at once, naming it.
func (s *Server) Serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("RELAY_HTTP_ADDR %s: %w", addr, err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeOps listens on addr and serves the operations routes alone until ctx
// is cancelled (RELAY_METRICS_ADDR). Call SeparateOps to take them off the
// public listener.
func (s *Server) ServeOps(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("RELAY_METRICS_ADDR %s: %w", addr, err)
	}
	return s.ServeOpsListener(ctx, ln)
}

// ServeOpsListener serves the operations routes alone on ln until ctx is
// cancelled.
func (s *Server) ServeOpsListener(ctx context.Context, ln net.Listener) error {
	return serve(ctx, s.log, s.Ops, ln)
}

// ServeListener serves on ln until ctx is cancelled.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	return serve(ctx, s.log, s.public(), ln)
}

// Timeouts of every listener. Reading a request's body is bounded by its
// handler (the webhook gateway gives each provider its own deadline).
const (
	// ReadHeaderTimeout bounds the arrival of a request's headers.
	ReadHeaderTimeout = 5 * time.Second
	// MaxHeaderBytes bounds a request's headers (net/http's default is 1 MiB).
	MaxHeaderBytes = 64 << 10
	// WriteTimeout bounds handling a request and writing its answer.
	WriteTimeout = 2 * time.Minute
)

func serve(ctx context.Context, log *slog.Logger, h http.Handler, ln net.Listener) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		ConnContext:       withConn,
	}
	log.Info("http listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(readAheadListener{ln}) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
