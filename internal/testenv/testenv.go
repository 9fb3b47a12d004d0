// Package testenv decides what an integration test does when a server or tool
// it needs is missing: on a developer's machine it skips with a message saying
// what to start; in CI (CI=true) it fails, because CI provides everything.
// It also holds the helpers every test package shares: WaitFor and Poll
// wait for a condition with a deadline, Receive for a value on a channel
// (Quiet for none), Go runs a service for a test, Listen listens on a random
// loopback port, FreeAddr and FreePort find a port nothing listens on,
// Buffer collects concurrent writes, ReadFile and WriteFile read and write a
// test's files.
package testenv

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// InCI reports whether the tests run in CI, where nothing may be skipped.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing stops the test because a dependency is missing: t.Fatalf in CI,
// t.Skipf elsewhere. The message should say what to start or install.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true and a required dependency is missing: "+format, args...)
	}
	t.Skipf("skipping: "+format, args...)
}

// Getenv returns the environment variable or, when unset, def.
func Getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// SkipShort skips a long test under -short on a developer's machine; in CI,
// where nothing may be skipped, -short is a failure.
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if !testing.Short() {
		return
	}
	if InCI() {
		t.Fatalf("CI=true and -short: %s may not be skipped in CI", what)
	}
	t.Skipf("skipping under -short: %s", what)
}

// WaitFor polls cond every few milliseconds until it holds, and fails the test
// saying what it waited for when it still does not hold after within. It may be
// called from the test's goroutine only (it calls t.Fatalf).
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Poll is WaitFor for a condition that can say why it does not hold yet:
// cond returns false and the reason, and the failure after within quotes
// the last reason. Like WaitFor, it calls t.Fatalf.
func Poll(t testing.TB, within time.Duration, cond func() (ok bool, why string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Receive returns the next value from ch, and fails the test saying what
// it waited for when none comes within. Like WaitFor, it calls t.Fatalf.
func Receive[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
	var zero T
	return zero
}

// Quiet fails the test when ch yields a value within d: nothing more was
// sent. It reports the value with what, and calls t.Fatalf.
func Quiet[T any](t testing.TB, ch <-chan T, d time.Duration, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected %s: %+v", what, v)
	case <-time.After(d):
	}
}

// Go runs run on its own goroutine until stop is called or the test ends,
// whichever is first: stop cancels run's context, waits for run to return,
// and reports an error it returned (naming what) with t.Errorf. stop may be
// called more than once and from cleanups.
func Go(t testing.TB, what string, run func(ctx context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Logger logs at level and above to the test's output, so a failing test
// shows what the service under test said.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// ReadFile returns the content of the file at path; an error stops the
// test.
func ReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WriteFile writes content to path, making its directory first, and returns
// path; an error stops the test. The file is readable by everyone, as files
// a user writes usually are (0o644).
func WriteFile(t testing.TB, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// NPMBin returns the path of an executable the npm fixtures install
// (testdata/npm/node_modules/.bin/name), or stops the test, saying how to
// install them, when it or node is missing.
func NPMBin(t testing.TB, name string) string {
	t.Helper()
	bin := filepath.Join(".bin", name)
	return filepath.Join(NPMModules(t, name, bin), bin)
}

// NPMModules returns the absolute path of the npm fixtures' node_modules
// (testdata/npm/node_modules), or stops the test, saying how to install
// them, when the file rel inside it (what names it in the message) or node
// is missing.
func NPMModules(t testing.TB, what, rel string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	mods, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", "testdata", "npm", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mods, rel)); err != nil {
		Missing(t, "%s not installed; run scripts/setup.sh (npm ci in testdata/npm)", what)
	}
	if _, err := exec.LookPath("node"); err != nil {
		Missing(t, "node is not installed")
	}
	return mods
}

// Listen listens on a random loopback TCP port, for a server the test
// starts; the listener is closed when the test ends (closing it sooner, as a
// server does when it stops, is fine).
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// FreeAddr returns a loopback address ("127.0.0.1:port") that nothing
// listened on a moment ago: for a server the test starts, or for a client
// to find nothing there.
//
// The port is drawn from below the kernel's ephemeral range (on Linux
// 32768-60999 unless configured otherwise; higher elsewhere), which is where
// the local ports of outgoing connections come from: a port the kernel
// handed out for a listener and took back would be free for the next
// outgoing connection to take before the test binds it, and a busy test run
// makes many. When no port down there is free, the kernel picks one.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 64 {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(freeLow+rand.IntN(freeHigh-freeLow)))
		if err != nil {
			continue // in use
		}
		defer l.Close()
		return l.Addr().String()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// freeLow and freeHigh bound the ports FreeAddr draws from: below the
// ephemeral ranges of Linux (32768), macOS and Windows (49152).
const freeLow, freeHigh = 20000, 32000

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

// Buffer is a bytes.Buffer safe for concurrent use: for the writes of a
// logger or of a command's output that a test reads while they go on. The
// zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ErrorNames reports (t.Errorf) an err that is nil or whose message lacks
// any of want: the settings, fields or places an error must name.
func ErrorNames(t testing.TB, err error, want ...string) {
	t.Helper()
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("got error %v, want one naming %q", err, w)
		}
	}
}
