package bus

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// inProcess connects the bus's client to its embedded server without a
// socket. The server's own in-process connection is a net.Pipe: unbuffered,
// so each server write waits for the client to read it, and a client that
// is busy (or waits on its own lock while the server writes to it) is cut
// off as a slow consumer once the server's write deadline passes. inProcess
// buffers the server-to-client direction as a socket's receive buffer does:
// a goroutine reads the pipe as fast as the server writes and queues what it
// read, up to inProcessBuffer bytes (then the server waits, as it would on a
// full socket). The client-to-server direction stays a direct write, which
// the server's read loop takes at once.
type inProcess struct{ ns *server.Server }

// inProcessBuffer bounds the bytes read from the server and not yet by the
// client; inProcessChunk is the most one read of the pipe takes.
const (
	inProcessBuffer = 4 << 20
	inProcessChunk  = 32 << 10
)

// InProcessConn implements nats.InProcessConnProvider.
func (p inProcess) InProcessConn() (net.Conn, error) {
	pipe, err := p.ns.InProcessConn()
	if err != nil {
		return nil, err
	}
	c := &bufferedConn{
		Conn: pipe, readable: make(chan struct{}, 1), writable: make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
	go c.pump()
	return c, nil
}

// bufferedConn is the client's end of an in-process connection: writes go
// straight to the pipe, reads come from what pump queued.
type bufferedConn struct {
	net.Conn // the pipe

	mu       sync.Mutex
	queue    [][]byte  // read from the server, not yet by the client
	queued   int       // bytes in queue
	end      error     // why the pipe ended, once it has
	deadline time.Time // of reads

	rest []byte // of the chunk being read; only Read touches it

	readable  chan struct{} // signalled when queue grows or the pipe ends
	writable  chan struct{} // signalled when queue shrinks
	closeOnce sync.Once
	closed    chan struct{}
}

// pump moves what the server writes into the queue until the pipe ends.
func (c *bufferedConn) pump() {
	buf := make([]byte, inProcessChunk)
	for {
		n, err := c.Conn.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			c.mu.Lock()
			c.queue = append(c.queue, chunk)
			c.queued += n
			full := c.queued >= inProcessBuffer
			c.mu.Unlock()
			signal(c.readable)
			for full {
				select {
				case <-c.writable:
				case <-c.closed:
					c.finish(net.ErrClosed)
					return
				}
				c.mu.Lock()
				full = c.queued >= inProcessBuffer
				c.mu.Unlock()
			}
		}
		if err != nil {
			c.finish(err)
			return
		}
	}
}

// finish records why the pipe ended and wakes a waiting reader.
func (c *bufferedConn) finish(err error) {
	if errors.Is(err, io.ErrClosedPipe) {
		err = io.EOF
	}
	c.mu.Lock()
	c.end = err
	c.mu.Unlock()
	signal(c.readable)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Read implements net.Conn, honouring the read deadline.
func (c *bufferedConn) Read(p []byte) (int, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for len(c.rest) == 0 {
		c.mu.Lock()
		if len(c.queue) > 0 {
			c.rest = c.queue[0]
			c.queue[0] = nil
			c.queue = c.queue[1:]
			c.queued -= len(c.rest)
			c.mu.Unlock()
			signal(c.writable)
			break
		}
		end, deadline := c.end, c.deadline
		c.mu.Unlock()
		if end != nil {
			return 0, end
		}
		var timeout <-chan time.Time
		if !deadline.IsZero() {
			wait := time.Until(deadline)
			if wait <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			timeout = timer.C
		}
		select {
		case <-c.readable:
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		}
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	return n, nil
}

// Close implements net.Conn.
func (c *bufferedConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// SetDeadline implements net.Conn.
func (c *bufferedConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn; it applies to reads that start later.
func (c *bufferedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}
