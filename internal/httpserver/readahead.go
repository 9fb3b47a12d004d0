package httpserver

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// ReadAhead is the most a connection reads from its socket at once for a
// read smaller than that. net/http reads a request through a 4 KiB buffer,
// so a 14 kB webhook took four read system calls; read ahead, it takes one.
const ReadAhead = 32 << 10

// readAheadPool holds the ReadAhead-byte buffers of the connections.
var readAheadPool = sync.Pool{New: func() any { b := make([]byte, ReadAhead); return &b }}

// readAheadListener accepts connections that read ahead (see readAheadConn).
type readAheadListener struct{ net.Listener }

func (l readAheadListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newReadAheadConn(c), nil
}

// readAheadConn reads from its socket up to ReadAhead bytes at once when it
// is asked for less, and serves the following reads from what it got. It
// takes a buffer from readAheadPool only once the socket is readable, and
// gives it back as soon as its bytes are read: a connection that waits for
// data holds no buffer, and one with a buffer holds bytes its client sent.
// Reads of ReadAhead bytes or more go to the socket directly. Reads must not
// be concurrent (net/http's are not); Close and the deadlines may be.
type readAheadConn struct {
	net.Conn
	tcp  *net.TCPConn
	raw  syscall.RawConn
	fill func(fd uintptr) bool // c.readFD, bound once

	buf  *[]byte // unread bytes are (*buf)[r:w]; nil when there are none
	r, w int
	// unread is w-r, for Arrived, which a handler may call while another
	// goroutine reads (net/http's read that watches for a hang-up).
	unread atomic.Int64

	// The result of the last fill.
	n     int
	errno error
}

// newReadAheadConn returns c reading ahead when it is a TCP connection,
// else c itself.
func newReadAheadConn(c net.Conn) net.Conn {
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return c
	}
	rc := &readAheadConn{Conn: c, tcp: tcp, raw: raw}
	rc.fill = rc.readFD
	return rc
}

// Read reads as net.Conn's Read does, with the same errors.
func (c *readAheadConn) Read(p []byte) (int, error) {
	if c.buf != nil {
		n := copy(p, (*c.buf)[c.r:c.w])
		if c.r += n; c.r == c.w {
			readAheadPool.Put(c.buf)
			c.buf = nil
		}
		c.unread.Store(int64(c.w - c.r))
		return n, nil
	}
	if len(p) == 0 || len(p) >= ReadAhead {
		return c.Conn.Read(p)
	}
	if err := c.raw.Read(c.fill); err != nil {
		if op, ok := err.(*net.OpError); ok {
			op.Op = "read" // "raw-read", the RawConn's own new error; net.Conn's Read says "read"
		}
		return 0, err
	}
	b, n := c.buf, c.n
	switch {
	case c.errno != nil:
		return 0, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(),
			Err: os.NewSyscallError("read", c.errno)}
	case n == 0:
		return 0, io.EOF
	case n <= len(p):
		copy(p, (*b)[:n])
		readAheadPool.Put(b)
		c.buf = nil
		return n, nil
	}
	copy(p, (*b)[:len(p)])
	c.r, c.w = len(p), n
	c.unread.Store(int64(n - len(p)))
	return len(p), nil
}

// connKey is the context key of a request's *readAheadConn.
type connKey struct{}

// withConn is the server's ConnContext: it keeps a read-ahead connection in
// the context of its requests, for Arrived.
func withConn(ctx context.Context, c net.Conn) context.Context {
	if rc, ok := c.(*readAheadConn); ok {
		return context.WithValue(ctx, connKey{}, rc)
	}
	return ctx
}

// Arrived returns how many bytes of r's connection have arrived that
// net/http has not read yet, as far as the server can tell without asking the
// kernel: those it read ahead, not those in net/http's own 4 KiB buffer. It
// is 0 for a request this package's server does not serve. A handler may
// size a body buffer with it: those bytes were sent.
func Arrived(r *http.Request) int {
	if rc, ok := r.Context().Value(connKey{}).(*readAheadConn); ok {
		return int(rc.unread.Load())
	}
	return 0
}

// readFD is the RawConn read of one fill: with the socket readable, it
// reads into a pooled buffer (c.buf, c.n, c.errno); it gives the buffer back
// and reports false, to wait, when there is nothing to read after all.
func (c *readAheadConn) readFD(fd uintptr) bool {
	b := readAheadPool.Get().(*[]byte)
	var n int
	var err error
	for {
		n, err = syscall.Read(int(fd), *b)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EAGAIN {
		readAheadPool.Put(b)
		return false
	}
	if err != nil || n <= 0 {
		readAheadPool.Put(b)
		c.buf, c.n, c.errno = nil, 0, err
		return true
	}
	c.buf, c.n, c.errno = b, n, nil
	return true
}

// CloseWrite closes the writing side, as net/http does to end a connection
// gracefully.
func (c *readAheadConn) CloseWrite() error { return c.tcp.CloseWrite() }

// ReadFrom writes what it reads from r, as *net.TCPConn does (with sendfile
// or splice where it can).
func (c *readAheadConn) ReadFrom(r io.Reader) (int64, error) { return c.tcp.ReadFrom(r) }
