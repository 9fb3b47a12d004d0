package bus_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
)

// cluster is a three-node JetStream cluster in this process, with routes on
// loopback random ports.
type cluster struct {
	nodes []*server.Server
}

func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	routePorts := make([]int, n)
	for i := range routePorts {
		routePorts[i] = testenv.FreePort(t)
	}
	c := &cluster{}
	for i := range n {
		var routes []*url.URL
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		c.nodes = append(c.nodes, bustest.StartServer(t, &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
			JetStream: true, StoreDir: t.TempDir(),
			Cluster: server.ClusterOpts{Name: "relay", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  routes,
		}))
	}
	return c
}

func (c *cluster) urls() string {
	u := make([]string, len(c.nodes))
	for i, ns := range c.nodes {
		u[i] = ns.ClientURL()
	}
	return strings.Join(u, ",")
}

func (c *cluster) node(name string) *server.Server {
	for _, ns := range c.nodes {
		if ns.Name() == name {
			return ns
		}
	}
	return nil
}

// On a three-node cluster with RELAY_STREAM_REPLICAS=3, losing a node
// (the inbound stream's leader) mid-run loses nothing: every acknowledged
// publish is consumed, and publishing and consuming go on throughout.
func TestClusterNodeLoss(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "the three-node cluster test")
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b, err := bus.Connect(ctx, bus.Config{URL: c.urls(), Prefix: "cluster", Name: t.Name(), Replicas: 3})
	if err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	t.Cleanup(b.Close)

	s := checkReplicated(ctx, t, b)

	var mu sync.Mutex
	seen := map[string]int{}
	var lastConsumed atomic.Int64
	run(t, b, bus.ConsumerConfig{Name: "agent", Subject: "in.>", Concurrency: 8, AckWait: 5 * time.Second, Heartbeat: time.Second}, func(_ context.Context, m *bus.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m.Header.Get("Nats-Msg-Id")]++
		lastConsumed.Store(time.Now().UnixNano())
		return nil
	})

	pub := startPublisher(ctx, b)
	published := &pub.published
	testenv.WaitFor(t, 20*time.Second, "publishing before the node loss", func() bool { return published.Load() >= 300 })
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info: %v", err)
	}
	victim := c.node(info.Cluster.Leader)
	if victim == nil {
		t.Fatalf("no node named %q", info.Cluster.Leader)
	}
	killedAt := time.Now()
	before := published.Load()
	victim.Shutdown()
	testenv.WaitFor(t, 30*time.Second, "publishing after the node loss", func() bool { return published.Load() >= before+300 })
	testenv.WaitFor(t, 30*time.Second, "consuming after the node loss", func() bool { return lastConsumed.Load() > killedAt.UnixNano() })
	pub.stop()
	testenv.WaitFor(t, 30*time.Second, "every acknowledged publish consumed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range pub.acked {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	redelivered := 0
	for _, n := range seen {
		redelivered += n - 1
	}
	mu.Unlock()
	t.Logf("killed %s (stream leader); published %d (%d after the loss), lost 0, failed attempts %d, longest publish gap %s, consumed twice %d",
		victim.Name(), published.Load(), published.Load()-before, pub.retries.Load(), time.Duration(pub.maxGap.Load()).Round(time.Millisecond), redelivered)
}

// checkReplicated checks that the inbound stream and a key-value bucket made
// through b have three replicas, and returns the stream.
func checkReplicated(ctx context.Context, t *testing.T, b *bus.Bus) jetstream.Stream {
	t.Helper()
	s, err := b.JetStream().Stream(ctx, b.StreamName("in.x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Replicas; got != 3 {
		t.Fatalf("inbound stream replicas: got %d, want 3", got)
	}
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "cluster_state"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas; got != 3 {
		t.Fatalf("key-value bucket replicas: got %d, want 3", got)
	}

	return s
}

// publisher publishes envelopes with the ids d-0, d-1, ... one at a time,
// repeating each until it is acknowledged, until stop.
type publisher struct {
	published, retries atomic.Int64
	maxGap             atomic.Int64    // the longest time between two acknowledgements, in ns
	acked              map[string]bool // read it after stop
	cancel             context.CancelFunc
	done               chan struct{}
}

func startPublisher(ctx context.Context, b *bus.Bus) *publisher {
	ctx, cancel := context.WithCancel(ctx)
	p := &publisher{acked: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	go p.run(ctx, b)
	return p
}

func (p *publisher) run(ctx context.Context, b *bus.Bus) {
	defer close(p.done)
	last := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		id := fmt.Sprintf("d-%d", i)
		for ctx.Err() == nil {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := b.Publish(c, "in.github.issues", newEnv(id), bus.WithMsgID(id))
			cancel()
			if err == nil {
				p.acked[id] = true
				p.published.Add(1)
				if gap := time.Since(last); int64(gap) > p.maxGap.Load() {
					p.maxGap.Store(int64(gap))
				}
				last = time.Now()
				break
			}
			p.retries.Add(1)
		}
	}
}

// stop ends the publishing and waits for it.
func (p *publisher) stop() {
	p.cancel()
	<-p.done
}
