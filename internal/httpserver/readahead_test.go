package httpserver

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

// tcpPair returns the two ends of a loopback TCP connection: the client's
// and the server's, the server's as Accept returned it.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln := testenv.Listen(t)
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

// readAhead returns the server end of a loopback connection reading ahead.
func readAhead(t *testing.T) (client net.Conn, server *readAheadConn) {
	t.Helper()
	client, s := tcpPair(t)
	rc, ok := newReadAheadConn(s).(*readAheadConn)
	if !ok {
		t.Fatalf("a TCP connection was not wrapped: %T", s)
	}
	return client, rc
}

// Whatever the sizes of the writes and of the reads, a reading-ahead
// connection returns the bytes sent, in order, then io.EOF, and holds no
// buffer once it has handed out what it read.
func TestReadAheadReturnsTheBytesSent(t *testing.T) {
	t.Parallel()
	for name, reads := range map[string][]int{
		"net/http's 4 KiB":        {4096},
		"one byte":                {1},
		"small and odd":           {1, 7, 300, 4095, 13},
		"read-ahead sized":        {ReadAhead - 1, ReadAhead, ReadAhead + 1},
		"large and small":         {64 << 10, 5, 4096, 100 << 10},
		"around the buffer's end": {ReadAhead / 2, ReadAhead/2 + 1, 3},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			client, server := readAhead(t)
			rng := rand.New(rand.NewPCG(uint64(len(name)), 7))
			sent := make([]byte, 300<<10)
			for i := range sent {
				sent[i] = byte(rng.Uint32())
			}
			go func() {
				defer client.Close()
				for rest := sent; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(40<<10))
					if _, err := client.Write(rest[:n]); err != nil {
						return
					}
					rest = rest[n:]
				}
			}()
			var got []byte
			for i := 0; ; i++ {
				p := make([]byte, reads[i%len(reads)])
				n, err := server.Read(p)
				got = append(got, p[:n]...)
				if err == io.EOF {
					if n != 0 {
						t.Errorf("EOF with %d bytes, want them before it", n)
					}
					break
				}
				if err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
				if server.buf == nil && server.unread.Load() != 0 {
					t.Fatalf("no buffer but %d bytes unread", server.unread.Load())
				}
			}
			if !bytes.Equal(got, sent) {
				t.Fatalf("got %d bytes, want the %d sent, in order", len(got), len(sent))
			}
			if server.buf != nil {
				t.Error("a buffer is held after every byte was read")
			}
		})
	}
}

// errShape is err's text with the connection's addresses named.
func errShape(err error, c net.Conn) string {
	s := strings.ReplaceAll(err.Error(), c.LocalAddr().String(), "LOCAL")
	return strings.ReplaceAll(s, c.RemoteAddr().String(), "REMOTE")
}

// A reading-ahead connection fails as the connection under it does: the
// same error text, the same *net.OpError, the same errors.Is answers.
func TestReadAheadErrorsAsTheConn(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cause func(client, server net.Conn)
		is    error
	}{
		"deadline passed": {func(_, s net.Conn) { _ = s.SetReadDeadline(time.Now().Add(-time.Second)) }, os.ErrDeadlineExceeded},
		"deadline while waiting": {func(_, s net.Conn) {
			_ = s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		}, os.ErrDeadlineExceeded},
		"closed":          {func(_, s net.Conn) { s.Close() }, net.ErrClosed},
		"reset by client": {func(c, _ net.Conn) { _ = c.(*net.TCPConn).SetLinger(0); c.Close() }, syscall.ECONNRESET},
		"client done":     {func(c, _ net.Conn) { c.Close() }, io.EOF},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got [2]error
			var shapes [2]string
			for i, wrap := range []bool{false, true} {
				client, server := tcpPair(t)
				if wrap {
					server = newReadAheadConn(server)
				}
				tc.cause(client, server)
				deadline := time.Now().Add(5 * time.Second)
				for got[i] == nil && time.Now().Before(deadline) { // a reset may take a moment to arrive
					_, got[i] = server.Read(make([]byte, 4096))
				}
				if got[i] == nil {
					t.Fatal("no error")
				}
				shapes[i] = errShape(got[i], server)
			}
			if shapes[1] != shapes[0] {
				t.Errorf("got %q, want %q as the connection says", shapes[1], shapes[0])
			}
			if !errors.Is(got[1], tc.is) || !errors.Is(got[0], tc.is) {
				t.Errorf("got %v and %v, want both to be %v", got[1], got[0], tc.is)
			}
			var op, want *net.OpError
			if errors.As(got[1], &op) != errors.As(got[0], &want) {
				t.Fatalf("got %#v, want %#v", got[1], got[0])
			}
			if op != nil && (op.Op != want.Op || op.Net != want.Net || op.Timeout() != want.Timeout()) {
				t.Errorf("got %+v, want %+v", op, want)
			}
		})
	}
}

// Bytes that arrived after a deadline passed are still returned once it is
// cleared, and CloseWrite reaches the client.
func TestReadAheadDeadlineThenData(t *testing.T) {
	t.Parallel()
	client, server := readAhead(t)
	_ = server.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := server.Read(make([]byte, 16)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
	_ = server.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(client, "hello"); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 16)
	n, err := server.Read(p)
	if err != nil || string(p[:n]) != "hello" {
		t.Fatalf("got %q, %v; want hello", p[:n], err)
	}
	if err := server.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := client.Read(p); n != 0 || err != io.EOF {
		t.Errorf("client got %d bytes, %v; want EOF after CloseWrite", n, err)
	}
}
