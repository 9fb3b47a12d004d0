package httpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/internal/testenv"
)

func listen(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln := testenv.Listen(t)
	return ln, "http://" + ln.Addr().String()
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func serve(t *testing.T, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}

// dial serves s on a loopback listener until the test ends and returns a
// connection to it.
func dial(t *testing.T, s *httpserver.Server) net.Conn {
	t.Helper()
	ln, _ := listen(t)
	serve(t, func(ctx context.Context) error { return s.ServeListener(ctx, ln) })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestOpsListener(t *testing.T) {
	t.Parallel()
	s := httpserver.New(nil, prometheus.NewRegistry())
	var lost atomic.Bool
	s.AddLiveness("bus", func(context.Context) error {
		if lost.Load() {
			return errors.New("connection closed for good")
		}
		return nil
	})
	s.AddCheck("bus", func(context.Context) error { return nil })
	pub, pubURL := listen(t)
	serve(t, func(ctx context.Context) error { return s.ServeListener(ctx, pub) })

	// By default the operations routes share the public listener.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if got := get(t, pubURL+p); got != http.StatusOK {
			t.Errorf("public %s: got %d, want 200", p, got)
		}
	}

	s.SeparateOps()
	opsLn := testenv.Listen(t)
	addr := opsLn.Addr().String()
	_ = opsLn.Close()
	serve(t, func(ctx context.Context) error { return s.ServeOps(ctx, addr) })
	waitOK(t, "http://"+addr+"/healthz")
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if got := get(t, pubURL+p); got != http.StatusNotFound {
			t.Errorf("public %s after SeparateOps: got %d, want 404", p, got)
		}
		if got := get(t, "http://"+addr+p); got != http.StatusOK {
			t.Errorf("ops %s: got %d, want 200", p, got)
		}
	}
	lost.Store(true)
	if got := get(t, "http://"+addr+"/healthz"); got != http.StatusServiceUnavailable {
		t.Errorf("healthz with a failing liveness check: got %d, want 503", got)
	}
}

func waitOK(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not answering: %v", url, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A client that never finishes its headers is cut off.
func TestHeaderTimeout(t *testing.T) {
	t.Parallel()
	c := dial(t, httpserver.New(nil, prometheus.NewRegistry()))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(3 * httpserver.ReadHeaderTimeout))
	_, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("got %v, want the server to close the connection", err)
	}
	if d := time.Since(start); d > 2*httpserver.ReadHeaderTimeout {
		t.Errorf("closed after %s, want about %s", d, httpserver.ReadHeaderTimeout)
	}
}

// A request whose bytes all came in one write has arrived whole: Arrived
// counts what is past net/http's 4 KiB buffer, and the body reads intact.
func TestArrived(t *testing.T) {
	t.Parallel()
	s := httpserver.New(nil, prometheus.NewRegistry())
	type seen struct {
		arrived int
		body    []byte
	}
	got := make(chan seen, 1)
	s.Echo.POST("/in", func(c echo.Context) error {
		a := httpserver.Arrived(c.Request())
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		got <- seen{a, body}
		return c.NoContent(http.StatusNoContent)
	})
	c := dial(t, s)
	body := bytes.Repeat([]byte("0123456789abcdef"), 1000)
	req := fmt.Sprintf("POST /in HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := <-got
	if want := len(req) - 4096; r.arrived != want {
		t.Errorf("Arrived: got %d, want %d (the request less net/http's 4 KiB)", r.arrived, want)
	}
	if !bytes.Equal(r.body, body) {
		t.Errorf("got a %d-byte body, want the %d bytes sent", len(r.body), len(body))
	}
	if a := httpserver.Arrived(httptest.NewRequest(http.MethodGet, "/", nil)); a != 0 {
		t.Errorf("Arrived of a request no server read: got %d, want 0", a)
	}
}
