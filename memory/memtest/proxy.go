// Package memtest holds test helpers for the memory packages and the memory
// worker. Stores opens the embedded stores on a test's bus. Proxy is a TCP
// proxy for fault tests: it forwards a local port to a real server (Redis,
// Postgres) and can take the link down (closing every connection and
// refusing new ones) and bring it back on the same port.
package memtest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards Addr to a target. Use NewProxy; it is closed when the test ends.
type Proxy struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// New starts a proxy to target on a random loopback port.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("memtest: %v", err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() { p.Down(); p.wg.Wait() })
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				defer p.wg.Done()
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
			}
			p.wg.Add(2)
			go pipe(c, up)
			go pipe(up, c)
		}
	}()
}

// Down closes the listener and every open connection: clients see the server
// disappear.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Up listens again on the same address.
func (p *Proxy) Up(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("memtest: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}
