package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/procs"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/agent"
)

var clusterLong = flag.Bool("cluster.long", false,
	"run TestClusterFaults' long form (a node SIGKILLed every 15 s, workers every 2 s, 200 webhooks)")

type clusterParams struct {
	issues      int
	spread      time.Duration // the webhooks arrive over this time
	nodeEvery   time.Duration // a node kill this often
	down        time.Duration // a killed node restarts after this
	kinds       []string      // the short form's kills, in order; nil: random nodes
	workerEvery time.Duration // a random worker killed this often (0: never)
	settle      time.Duration
}

// natsServerBin returns a nats-server binary of the version go.mod
// requires, built with `go build` once and kept in the user's cache
// directory. Only when the build fails does it fall back to
// /usr/sbin/nats-server (it logs which).
func natsServerBin(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2").Output()
	version := strings.TrimSpace(string(out))
	if err == nil && version != "" {
		cache, _ := os.UserCacheDir()
		bin := filepath.Join(cmpOr(cache, os.TempDir()), "relay-test", "nats-server-"+version)
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
		tmp := bin + "." + uuid.NewString()
		out, err := exec.Command("go", "build", "-o", tmp, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err == nil && os.Rename(tmp, bin) == nil {
			t.Logf("built nats-server %s into %s", version, bin)
			return bin
		}
		t.Logf("go build nats-server %s: %v\n%s", version, err, out)
	}
	const system = "/usr/sbin/nats-server"
	if _, err := os.Stat(system); err != nil {
		t.Fatalf("no nats-server: the build failed and %s is missing", system)
	}
	t.Logf("using %s (building nats-server failed)", system)
	return system
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// natsNode is one nats-server process of a cluster, restartable on its
// ports and store.
type natsNode struct {
	name, bin, store string
	port, route, mon int
	routes           []string
	logs             *syncBuffer
	mu               sync.Mutex
	proc             *procs.Process
}

type natsCluster struct{ nodes []*natsNode }

func startNATSCluster(t *testing.T, n int) *natsCluster {
	t.Helper()
	bin := natsServerBin(t)
	c := &natsCluster{}
	for i := range n {
		c.nodes = append(c.nodes, &natsNode{name: fmt.Sprintf("n%d", i+1), bin: bin, store: t.TempDir(),
			port: testenv.FreePort(t), route: testenv.FreePort(t), mon: testenv.FreePort(t), logs: &syncBuffer{}})
	}
	for _, nd := range c.nodes {
		for _, o := range c.nodes {
			if o != nd {
				nd.routes = append(nd.routes, fmt.Sprintf("nats://127.0.0.1:%d", o.route))
			}
		}
	}
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		wg.Go(func() { must(t, nd.start(t.Context())) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			nd.kill()
			if t.Failed() {
				t.Logf("nats %s log (last 2 KB):\n%s", nd.name, tail(nd.logs.String(), 2048))
			}
		}
	})
	return c
}

func (n *natsNode) start(ctx context.Context) error {
	cmd := exec.Command(n.bin, "-n", n.name, "-a", "127.0.0.1", "-p", fmt.Sprint(n.port), "-m", fmt.Sprint(n.mon),
		"-js", "-sd", n.store, "--cluster_name", "relay", "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", n.route),
		"--routes", strings.Join(n.routes, ","))
	cmd.Stderr = n.logs
	p, err := procs.Start(cmd)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	return p.WaitReady(ctx, fmt.Sprintf("http://127.0.0.1:%d/varz", n.mon), 30*time.Second)
}

// kill SIGKILLs the node, as a crash would.
func (n *natsNode) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		n.proc.Kill()
		n.proc = nil
	}
}

func (c *natsCluster) urls() string {
	u := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		u[i] = fmt.Sprintf("nats://127.0.0.1:%d", n.port)
	}
	return strings.Join(u, ",")
}

func (c *natsCluster) node(name string) *natsNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// metaLeader asks a live node's monitoring endpoint for the meta leader.
func (c *natsCluster) metaLeader() string {
	for _, n := range c.nodes {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", n.mon))
		if err != nil {
			continue
		}
		var jsz struct {
			Meta *struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		err = json.NewDecoder(resp.Body).Decode(&jsz)
		resp.Body.Close()
		if err == nil && jsz.Meta != nil && jsz.Meta.Leader != "" {
			return jsz.Meta.Leader
		}
	}
	return ""
}

func newClusterDeployment(t *testing.T, c *natsCluster, p clusterParams) *deployment {
	bin := os.Getenv("FAULT_RELAY_BIN") // another build of the relay, to compare versions
	if bin == "" {
		bin = relayBinary(t)
	}
	d := &deployment{t: t, cluster: c, slack: fakes.NewSlack(t), gh: fakes.NewGitHub(t), clicked: map[int]time.Time{}}
	llm := fakes.NewLLM(t, func(r *fakes.ChatRequest) fakes.Reply { time.Sleep(300 * time.Millisecond); return script(r) })
	env := faultEnv(t, d.slack, d.gh, llm, c.urls())
	env["RELAY_STREAM_REPLICAS"] = "3"
	// Debug for the agents: a lost issue's report shows how its task's
	// handlers decided (lostReport).
	agentEnv := maps.Clone(env)
	agentEnv["RELAY_LOG_LEVEL"] = "debug"
	d.startWorkers(t, bin, env, agentEnv)
	nc, err := nats.Connect(c.urls(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	must(t, err)
	t.Cleanup(nc.Close)
	d.nc = nc
	d.js, err = jetstream.New(nc)
	must(t, err)
	d.payload = issuesOpenedPayload(t)
	return d
}

type clusterResult struct {
	non2xx, lost, duplicated, exits int
	nodeKills                       []string
	workerKills, deadLetters        int
	p50, p99, max                   time.Duration
}

// run sends the webhooks while it kills nodes (and workers), then counts.
func (d *deployment) run(t *testing.T, p clusterParams) clusterResult {
	var r clusterResult
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	exits := d.watchExits(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { d.approveAll(ctx) })
	first := 5000
	watch := newCommentWatch(d.gh, first, p.issues)
	wg.Go(func() { watch.run(ctx) })
	accepted := make([]time.Time, p.issues)
	var non2xx atomic.Int64
	start := time.Now()
	waitSends := spreadOver(ctx, p.issues, p.spread, func(i int) {
		at, code := d.deliverOnce(ctx, first+i)
		if code/100 != 2 {
			non2xx.Add(1)
			t.Logf("issue #%d: webhook answered %d at %s", first+i, code, time.Since(start).Round(time.Millisecond))
			return
		}
		accepted[i] = at
	})
	r.nodeKills, r.workerKills = d.clusterChaos(t, p, start)
	waitSends()
	select {
	case <-watch.allSeen:
	case <-time.After(p.settle):
	}
	d.awaitDrained(ctx, t, "cluster faults", p.settle)
	res := phaseResult{name: "cluster faults", issues: p.issues}
	res.count(t, d, watch, accepted)
	r.lost, r.duplicated = res.lost, res.duplicated
	if r.lost > 0 {
		counts := watch.counts()
		for i := range p.issues {
			if counts[first+i] == 0 {
				d.lostReport(ctx, t, first+i)
			}
		}
	}
	r.deadLetters = d.deadLetters(ctx)
	var lat []time.Duration
	for i := range p.issues {
		if at, ok := watch.firstSeen(first + i); ok && !accepted[i].IsZero() {
			lat = append(lat, at.Sub(accepted[i]))
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		r.p50, r.p99, r.max = lat[len(lat)*50/100], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	}
	r.non2xx = int(non2xx.Load())
	r.exits = int(exits.Load())
	cancel()
	wg.Wait()
	return r
}

// deliverOnce delivers issue num's webhook once, as GitHub does, and
// returns when it was answered and the status (0: no answer).
func (d *deployment) deliverOnce(ctx context.Context, num int) (time.Time, int) {
	body, _ := openedIssue(d.payload, num, "cluster")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // GitHub's delivery timeout
	defer cancel()
	resp, err := http.DefaultClient.Do(githubWebhook(ctx, "http://"+d.ingest.addr, e2eGHSecret, "issues", uuid.NewString(), body))
	if err != nil {
		return time.Time{}, 0
	}
	resp.Body.Close()
	return time.Now(), resp.StatusCode
}

// watchExits counts worker processes that end without the test killing
// them (the test replaces w.proc before it kills).
func (d *deployment) watchExits(ctx context.Context) *atomic.Int64 {
	var n atomic.Int64
	go func() {
		seen := map[*procs.Process]bool{}
		for ctx.Err() == nil {
			for _, w := range d.workers {
				w.mu.Lock()
				p := w.proc
				w.mu.Unlock()
				if p == nil || seen[p] {
					continue
				}
				select {
				case <-p.Exited():
					w.mu.Lock()
					still := w.proc == p
					w.mu.Unlock()
					if still && ctx.Err() == nil {
						seen[p] = true
						n.Add(1)
						d.t.Logf("%s exited on its own:\n%s", w.name, tail(w.logs.String(), 2048))
					}
				default:
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return &n
}

// clusterChaos kills nodes (and workers) while the webhooks arrive.
func (d *deployment) clusterChaos(t *testing.T, p clusterParams, start time.Time) (nodeKills []string, workerKills int) {
	var restarts sync.WaitGroup
	defer restarts.Wait()
	nextNode := start.Add(p.nodeEvery / 2)
	nextWorker := start.Add(p.workerEvery)
	for k := 0; time.Since(start) < p.spread && (p.kinds == nil || k < len(p.kinds)); {
		now := time.Now()
		if p.workerEvery > 0 && now.After(nextWorker) {
			nextWorker = now.Add(p.workerEvery/2 + rand.N(p.workerEvery))
			w := d.workers[rand.N(len(d.workers))]
			w.kill()
			workerKills++
			if err := w.start(t); err != nil {
				t.Errorf("restart %s after a kill: %v", w.name, err)
			}
		}
		if now.After(nextNode) {
			nextNode = now.Add(p.nodeEvery)
			kind := "node"
			if p.kinds != nil {
				kind = p.kinds[k]
			}
			k++
			victim := d.victim(kind)
			if victim == nil {
				t.Errorf("no %s to kill", kind)
				continue
			}
			victim.kill()
			nodeKills = append(nodeKills, kind+"="+victim.name)
			t.Logf("killed nats %s (%s) at %s", victim.name, kind, time.Since(start).Round(time.Millisecond))
			restarts.Go(func() {
				time.Sleep(p.down)
				if err := victim.start(t.Context()); err != nil {
					t.Errorf("restart nats %s: %v", victim.name, err)
				}
			})
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nodeKills, workerKills
}

// victim is the node to kill for kind.
func (d *deployment) victim(kind string) *natsNode {
	c := d.cluster
	ctx, cancel := context.WithTimeout(d.t.Context(), 10*time.Second)
	defer cancel()
	leaderOf := func(stream string) string {
		for ctx.Err() == nil {
			s, err := d.js.Stream(ctx, stream)
			if err == nil {
				if info, err := s.Info(ctx); err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
					return info.Cluster.Leader
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		return ""
	}
	switch kind {
	case "meta leader":
		return c.node(c.metaLeader())
	case "inbound stream leader":
		return c.node(leaderOf("RELAY_IN"))
	case "bucket leader":
		return c.node(leaderOf("KV_relay_tasks"))
	}
	return c.nodes[rand.N(len(c.nodes))]
}

// lostReport logs what the relay holds of issue num, which got no comment:
// its inbound messages (stream sequence, message id), its task's every
// revision in the task bucket (status, step, calls, what is published, the
// lease), the work messages of the task, and the workers' log lines naming
// the task or its envelope (at most maxLostLines).
func (d *deployment) lostReport(ctx context.Context, t *testing.T, num int) {
	thread := fmt.Sprintf("#%d", num)
	names := []string{thread}
	d.streamMessages(ctx, t, "RELAY_IN", func(seq uint64, subject string, h nats.Header, e *envelope.Envelope) {
		if !strings.HasSuffix(e.Meta.Thread, thread) || e.Role != envelope.RoleUser {
			return
		}
		task := agent.TaskID(e.ID)
		t.Logf("issue %s: RELAY_IN seq %d %s envelope %s msg id %q -> task %s", thread, seq, subject, e.ID, h.Get(nats.MsgIdHdr), task)
		names = append(names, e.ID, task)
		d.taskHistory(ctx, t, thread, task)
		d.streamMessages(ctx, t, "RELAY_WORK", func(seq uint64, subject string, h nats.Header, w *envelope.Envelope) {
			if w.Meta.TaskID == task {
				t.Logf("issue %s: RELAY_WORK seq %d %s envelope %s msg id %q", thread, seq, subject, w.ID, h.Get(nats.MsgIdHdr))
			}
		})
	})
	n := 0
	for _, w := range d.workers {
		for line := range strings.SplitSeq(w.logs.String(), "\n") {
			if slices.ContainsFunc(names, func(s string) bool { return strings.Contains(line, s) }) {
				if n++; n <= maxLostLines {
					t.Logf("issue %s: %s: %s", thread, w.name, line)
				}
			}
		}
	}
	if n > maxLostLines {
		t.Logf("issue %s: %d more log lines not shown", thread, n-maxLostLines)
	}
}

// maxLostLines bounds the worker log lines lostReport shows per issue.
const maxLostLines = 200

// streamMessages calls f with every message of stream that holds an envelope.
func (d *deployment) streamMessages(ctx context.Context, t *testing.T, stream string, f func(seq uint64, subject string, h nats.Header, e *envelope.Envelope)) {
	s, err := d.js.Stream(ctx, stream)
	if err != nil {
		t.Logf("stream %s: %v", stream, err)
		return
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Logf("stream %s: %v", stream, err)
		return
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && ctx.Err() == nil; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted, or not kept
		}
		if e, err := envelope.Parse(m.Data); err == nil {
			f(seq, m.Subject, m.Header, e)
		}
	}
}

// taskHistory logs every revision of an agent task in the task bucket.
func (d *deployment) taskHistory(ctx context.Context, t *testing.T, thread, task string) {
	kv, err := d.js.KeyValue(ctx, agent.TaskBucket("relay"))
	if err != nil {
		t.Logf("issue %s: task bucket: %v", thread, err)
		return
	}
	hist, err := kv.History(ctx, task)
	if err != nil {
		t.Logf("issue %s: task %s: %v", thread, task, err)
		return
	}
	for _, e := range hist {
		var k agent.Task
		if err := json.Unmarshal(e.Value(), &k); err != nil {
			t.Logf("issue %s: task rev %d %s: %v", thread, e.Revision(), e.Operation(), err)
			continue
		}
		calls := make([]string, len(k.Calls))
		for i, c := range k.Calls {
			calls[i] = fmt.Sprintf("%s done=%t", c.ID, c.Done)
		}
		lease := "none"
		if k.Lease != nil {
			lease = fmt.Sprintf("owner=%s holder=%s until=%s", k.Lease.Owner, k.Lease.Holder, k.Lease.Until.Format("15:04:05.000"))
		}
		t.Logf("issue %s: task rev %d at %s: status %s step %d calls %v calls_published %t final_published %t lease %s",
			thread, e.Revision(), e.Created().Format("15:04:05.000"), k.Status, k.Step, calls, k.CallsPublished, k.FinalPublished, lease)
	}
}
