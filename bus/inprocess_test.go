package bus

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/secret"
)

// TestInProcessConnServerWritesDoNotWait: the server delivers to an
// in-process client that is not reading (busy, or waiting on its own lock)
// without waiting for it, as it would over a socket: the client is still
// connected after longer than the server's write deadline, and the messages
// are all there when it reads. Over the server's own unbuffered pipe the
// server's write waits for the reader until the deadline, then cuts the
// client off as a slow consumer.
func TestInProcessConnServerWritesDoNotWait(t *testing.T) {
	t.Parallel()
	const deadline = 250 * time.Millisecond
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, WriteDeadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	c, err := inProcess{ns}.InProcessConn()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	line := func() string {
		t.Helper()
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return strings.TrimSpace(l)
	}
	if l := line(); !strings.HasPrefix(l, "INFO ") {
		t.Fatalf("got %q, want the server's INFO", l)
	}
	if _, err := io.WriteString(c, "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nSUB quiet 1\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	if l := line(); l != "PONG" {
		t.Fatalf("got %q, want PONG", l)
	}

	pub, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const n = 500
	payload := strings.Repeat("x", 1<<10)
	for i := range n {
		if err := pub.Publish("quiet", []byte(payload)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatalf("publisher's flush while the subscriber does not read: %v", err)
	}
	// The subscriber stays busy for several write deadlines.
	time.Sleep(4 * deadline)
	if got := ns.NumSlowConsumers(); got != 0 {
		t.Fatalf("server counted %d slow consumers, want 0", got)
	}
	for i := range n {
		if l := line(); !strings.HasPrefix(l, "MSG quiet 1 ") {
			t.Fatalf("message %d: got %q, want MSG quiet", i, l)
		}
		if l := line(); l != payload {
			t.Fatalf("message %d: payload of %d bytes, want %d", i, len(l), len(payload))
		}
	}
}

// TestInProcessConnDeadlineAndClose: a read past its deadline fails with
// os.ErrDeadlineExceeded, and after Close a read reports the end.
func TestInProcessConnDeadlineAndClose(t *testing.T) {
	t.Parallel()
	ns, err := startEmbedded(t.TempDir(), "127.0.0.1:0", secret.Value{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	c, err := inProcess{ns}.InProcessConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf) // the server greets first
	if err != nil || !bytes.HasPrefix(buf[:n], []byte("INFO ")) {
		t.Fatalf("first read %q, %v; want the server's INFO", buf[:n], err)
	}
	if err := c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want %v", err, os.ErrDeadlineExceeded)
	}
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with nothing to read before the deadline: %v, want %v", err, os.ErrDeadlineExceeded)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue // what was queued before Close
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after Close: %v, want EOF or closed", err)
		}
		break
	}
}
