// Package httpserver builds the relay's HTTP server: the echo instance every
// service mounts its routes on, with /healthz, /readyz and /metrics.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
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
	Echo   *echo.Echo
	log    *slog.Logger
	mu     sync.Mutex
	checks map[string]Check
}

// New returns a server exposing reg on /metrics.
func New(log *slog.Logger, reg *prometheus.Registry) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	s := &Server{Echo: e, log: log, checks: map[string]Check{}}
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/readyz", s.ready)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	return s
}

// AddCheck registers a readiness check under name.
func (s *Server) AddCheck(name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = c
}

func (s *Server) ready(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	s.mu.Lock()
	checks := make(map[string]Check, len(s.checks))
	for k, v := range s.checks {
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
	return c.JSON(code, status)
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

// ServeListener serves on ln until ctx is cancelled.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.Echo,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	s.log.Info("http listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
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
