package procs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/procs"
	"github.com/relaystation/relay/internal/testenv"
)

// TestMain runs this test binary as the child process when PROCS_CHILD
// names a behaviour: "serve ADDR" answers on ADDR until SIGTERM, "exit"
// exits 3 at once, "stubborn ADDR" answers on ADDR and ignores SIGTERM.
func TestMain(m *testing.M) {
	switch mode, arg, _ := strings.Cut(os.Getenv("PROCS_CHILD"), " "); mode {
	case "":
		os.Exit(m.Run())
	case "serve", "stubborn":
		if mode == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		ln, err := net.Listen("tcp", arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
		go func() { <-ctx.Done(); srv.Close() }()
		_ = srv.Serve(ln)
		os.Exit(0)
	case "exit":
		os.Exit(3)
	}
}

// child starts this test binary in the given mode; the test kills it at the end.
func child(t *testing.T, mode string) *procs.Process {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROCS_CHILD="+mode)
	p, err := procs.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// ready starts this test binary in mode ("serve" or "stubborn") on a free
// address and waits until it answers there.
func ready(t *testing.T, mode string) *procs.Process {
	t.Helper()
	addr := testenv.FreeAddr(t)
	p := child(t, mode+" "+addr)
	if err := p.WaitReady(t.Context(), "http://"+addr+"/readyz", time.Minute); err != nil {
		t.Fatalf("WaitReady: got %v, want nil", err)
	}
	return p
}

func TestReadyThenGracefulStop(t *testing.T) {
	t.Parallel()
	p := ready(t, "serve")
	if !p.Stop(time.Minute) {
		t.Fatal("Stop: got killed, want a graceful exit on SIGTERM")
	}
	if err := p.Wait(); err != nil {
		t.Errorf("Wait: got %v, want exit 0", err)
	}
	p.Kill() // after the exit: returns at once
}

func TestWaitReadyExited(t *testing.T) {
	t.Parallel()
	p := child(t, "exit")
	err := p.WaitReady(t.Context(), "http://"+testenv.FreeAddr(t)+"/readyz", time.Minute)
	if !errors.Is(err, procs.ErrExited) || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("WaitReady: got %v, want ErrExited naming exit status 3", err)
	}
}

func TestWaitReadyTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	p := child(t, "serve "+testenv.FreeAddr(t))
	url := "http://" + testenv.FreeAddr(t) + "/readyz" // where nothing answers
	err := p.WaitReady(t.Context(), url, 100*time.Millisecond)
	if err == nil || errors.Is(err, procs.ErrExited) || !strings.Contains(err.Error(), "not ready after 100ms") {
		t.Errorf("WaitReady: got %v, want not ready after 100ms", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.WaitReady(ctx, url, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitReady on a cancelled context: got %v, want context.Canceled", err)
	}
}

func TestStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	p := ready(t, "stubborn")
	if p.Stop(100 * time.Millisecond) {
		t.Fatal("Stop: got a graceful exit, want a kill (the child ignores SIGTERM)")
	}
	var exit *exec.ExitError
	if err := p.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Wait: got %v, want killed by SIGKILL", err)
	}
}
