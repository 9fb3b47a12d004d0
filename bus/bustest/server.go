package bustest

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/relaystation/relay/internal/testenv"
)

// StartServer starts an in-process NATS server with opts and waits until it
// accepts connections; it is shut down when the test ends. A test may shut
// it down earlier and start another on the same port and store directory.
func StartServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats server on %s:%d not ready after 10s", opts.Host, opts.Port)
	}
	return ns
}

// Restartable is a JetStream server on a fixed loopback port and store
// directory, so a test can stop it and start it again where its clients
// expect it, as a restarted server would be. It is stopped when the test
// ends. Start and Stop are safe for concurrent use.
type Restartable struct {
	t    testing.TB
	opts server.Options

	mu  sync.Mutex
	srv *server.Server
}

// NewRestartable returns a stopped Restartable with opts (for example a
// user and password) on a free loopback port, storing under t.TempDir(); it
// sets opts' Host, Port, JetStream, StoreDir, NoSigs and NoLog.
func NewRestartable(t testing.TB, opts server.Options) *Restartable {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", testenv.FreePort(t)
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	r := &Restartable{t: t, opts: opts}
	t.Cleanup(r.Stop)
	return r
}

// Addr is the server's host:port.
func (r *Restartable) Addr() string {
	return net.JoinHostPort(r.opts.Host, strconv.Itoa(r.opts.Port))
}

// URL is the server's client URL, without credentials.
func (r *Restartable) URL() string { return fmt.Sprintf("nats://%s", r.Addr()) }

// Start starts the server and waits until it accepts connections.
func (r *Restartable) Start() {
	r.t.Helper()
	opts := r.opts
	srv := StartServer(r.t, &opts)
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
}

// Stop shuts the server down and waits until it is down; a stopped server
// stays stopped.
func (r *Restartable) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv == nil {
		return
	}
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
	r.srv = nil
}

// NewCluster returns n stopped Restartable servers forming one JetStream
// cluster named "relay" (nodes <prefix>1..<prefix>n, routes on free
// loopback ports), for tests that stop nodes and start them again on their
// stores.
func NewCluster(t testing.TB, prefix string, n int) []*Restartable {
	t.Helper()
	routePorts := make([]int, n)
	for i := range routePorts {
		routePorts[i] = testenv.FreePort(t)
	}
	nodes := make([]*Restartable, n)
	for i := range n {
		var routes []*url.URL
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		nodes[i] = NewRestartable(t, server.Options{
			ServerName: fmt.Sprintf("%s%d", prefix, i+1),
			Cluster:    server.ClusterOpts{Name: "relay", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:     routes,
		})
	}
	return nodes
}

// StartCluster is NewCluster with every node started.
func StartCluster(t testing.TB, prefix string, n int) []*Restartable {
	t.Helper()
	nodes := NewCluster(t, prefix, n)
	for _, node := range nodes {
		node.Start()
	}
	return nodes
}
