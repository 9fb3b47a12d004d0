package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/procs"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools"
)

var faultLong = flag.Bool("fault.long", false, "run the fault test's long form (many issues, minutes of faults)")

// faultParams size a fault run.
type faultParams struct {
	issues   int           // issues per phase
	faults   time.Duration // how long workers are killed (issues arrive over this time)
	every    time.Duration // one kill per this interval, on average
	natsAt   time.Duration // when NATS is stopped, once
	natsDown time.Duration // for how long
	settle   time.Duration // how long after the faults every answer must be posted
	think    time.Duration // the model's latency per answer
}

// TestFaults runs the split deployment as processes on one NATS server (1
// ingest, 2 agents, 1 tool runner, 1 memory, 2 approvals, 2 outbound) against
// the fake Slack, GitHub and model, sends issues.opened webhooks, approves
// every suggestion as it appears, and counts the GitHub comments per issue:
// first without faults, then while a random worker is killed (SIGKILL, then
// restarted, as a supervisor does) every ~2 s and NATS is stopped for 3 s
// once. Every issue must get exactly one comment and every consumer must end
// with nothing pending or unacknowledged. The short form (20 issues per phase,
// 8 s of faults) runs in CI; -fault.long runs 300 issues over 120 s of
// faults: go test ./internal/cli -run TestFaults -timeout 30m -args -fault.long.
// FAULT_RELAY_BIN runs the processes from another build of the relay, to
// compare versions under the same faults.
func TestFaults(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "fault injection with processes")
	p := faultParams{issues: 20, faults: 8 * time.Second, every: 2 * time.Second, natsAt: 3 * time.Second,
		natsDown: 3 * time.Second, settle: 40 * time.Second, think: 300 * time.Millisecond}
	if *faultLong {
		p = faultParams{issues: 300, faults: 120 * time.Second, every: 2 * time.Second, natsAt: 40 * time.Second,
			natsDown: 3 * time.Second, settle: 90 * time.Second, think: 300 * time.Millisecond}
	}
	began := time.Now()
	d := newDeployment(t, p)
	t.Logf("deployment up in %s", time.Since(began).Round(time.Millisecond))
	base := d.phase(t, "no faults", 1000, p, false)
	faulty := d.phase(t, "faults", 2000, p, true)
	for _, r := range []phaseResult{base, faulty} {
		t.Logf("%-9s issues %d: lost %d, duplicated %d, kills %d, NATS restarts %d, dead letters %d; "+
			"slowest webhook->comment %s, slowest approval click->comment %s, consumers drained %s after the last comment",
			r.name, r.issues, r.lost, r.duplicated, r.kills, r.natsRestarts, r.deadLetters,
			r.slowestWebhook.Round(time.Millisecond), r.slowestClick.Round(time.Millisecond), r.drained.Round(time.Millisecond))
		if r.lost != 0 || r.duplicated != 0 {
			t.Errorf("%s: %d issues without a comment, %d with more than one; want 0 and 0", r.name, r.lost, r.duplicated)
		}
	}
	if faulty.kills == 0 || faulty.natsRestarts != 1 {
		t.Errorf("faults: %d kills and %d NATS restarts, want some kills and one restart", faulty.kills, faulty.natsRestarts)
	}
}

// deployment is the split deployment under test.
type deployment struct {
	t       *testing.T
	nats    *bustest.Restartable
	cluster *natsCluster // instead of nats, for TestClusterFaults
	nc      *nats.Conn
	js      jetstream.JetStream
	slack   *fakes.Slack
	gh      *fakes.GitHub
	ingest  *worker
	workers []*worker
	payload []byte // issues.opened
	mu      sync.Mutex
	clicked map[int]time.Time
}

func newDeployment(t *testing.T, p faultParams) *deployment {
	bin := os.Getenv("FAULT_RELAY_BIN")
	if bin == "" {
		bin = relayBinary(t)
	}
	t.Logf("relay binary %s", bin)
	d := &deployment{t: t, nats: bustest.NewRestartable(t, server.Options{}), slack: fakes.NewSlack(t), gh: fakes.NewGitHub(t), clicked: map[int]time.Time{}}
	d.nats.Start()
	// The e2e model, answering after a model's latency, so kills meet tasks
	// mid-step.
	llm := fakes.NewLLM(t, func(r *fakes.ChatRequest) fakes.Reply { time.Sleep(p.think); return script(r) })
	env := faultEnv(t, d.slack, d.gh, llm, d.nats.URL())
	d.startWorkers(t, bin, env, nil)
	nc, err := nats.Connect(d.nats.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	must(t, err)
	t.Cleanup(nc.Close)
	d.nc = nc
	d.js, err = jetstream.New(nc)
	must(t, err)
	testenv.WaitFor(t, 30*time.Second, "the tool runner lists tools", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		list, err := tools.ListRemote(ctx, nc, "relay", "agent")
		return err == nil && len(list) > 0
	})
	d.payload = issuesOpenedPayload(t)
	return d
}

// faultEnv is the workers' environment: the e2e stack's settings, with the
// MCP server "everything" an echo tool served over streamable HTTP by the
// test (go-sdk), so the fault test needs no npm fixtures.
func faultEnv(t *testing.T, sl *fakes.Slack, gh *fakes.GitHub, llm *fakes.LLM, natsURL string) map[string]string {
	type msgIn struct {
		Message string `json:"message"`
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "fault-everything", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes back the input",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in msgIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Echo: " + in.Message}}}, nil, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	env := loopEnv(t, fmt.Sprintf(`{"servers": {"everything": {"type": "http", "url": %q}}}`, srv.URL), sl, gh, llm)
	env["NATS_URL"] = natsURL
	env["RELAY_LOG_FORMAT"] = "json"
	return env
}

// phaseResult is what one phase counted.
type phaseResult struct {
	name                         string
	issues, lost, duplicated     int
	kills, natsRestarts          int
	deadLetters                  int
	slowestWebhook, slowestClick time.Duration
	drained                      time.Duration
}

// phase sends p.issues webhooks (numbers first, first+1, ...) spread over
// p.faults, with faults when faulty, and counts the comments.
func (d *deployment) phase(t *testing.T, name string, first int, p faultParams, faulty bool) phaseResult {
	t.Helper()
	res := phaseResult{name: name, issues: p.issues}
	began := time.Now()
	defer func() { t.Logf("%s: phase took %s", name, time.Since(began).Round(time.Millisecond)) }()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.approveAll(ctx) }()
	watch := newCommentWatch(d.gh, first, p.issues)
	wg.Add(1)
	go func() { defer wg.Done(); watch.run(ctx) }()

	spread := p.faults
	if !faulty {
		spread = p.faults / 4
	}
	accepted, waitSends := d.sendIssues(ctx, first, p.issues, spread)
	if faulty {
		res.kills, res.natsRestarts = d.chaos(t, p)
	}
	waitSends()
	select {
	case <-watch.allSeen:
	case <-time.After(p.settle):
	}
	// Nothing may stay pending or unacknowledged once the work is done; then
	// no duplicate can follow either.
	res.drained = d.awaitDrained(ctx, t, name, p.settle)
	res.count(t, d, watch, accepted)
	res.deadLetters = d.deadLetters(ctx)
	cancel()
	wg.Wait()
	return res
}

// sendIssues sends the webhooks of issues first, first+1, ... first+n-1,
// the i-th spread*i/n from now, each from its own goroutine. Once waitAll
// returns, accepted[i] is when the relay accepted issue first+i (zero if
// ctx ended first).
func (d *deployment) sendIssues(ctx context.Context, first, n int, spread time.Duration) (accepted []time.Time, waitAll func()) {
	accepted = make([]time.Time, n)
	return accepted, spreadOver(ctx, n, spread, func(i int) { accepted[i] = d.sendIssue(ctx, first+i) })
}

// spreadOver calls send(i) for i from 0 to n-1, the i-th spread*i/n from
// now, each from its own goroutine; one not started when ctx ends is not
// called. waitAll waits for the calls.
func spreadOver(ctx context.Context, n int, spread time.Duration, send func(i int)) (waitAll func()) {
	var sends sync.WaitGroup
	start := time.Now()
	for i := range n {
		sends.Go(func() {
			if wait := time.Until(start.Add(spread * time.Duration(i) / time.Duration(n))); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
			}
			send(i)
		})
	}
	return sends.Wait
}

// startWorkers starts the relay's workers from bin with env (the agents
// with agentEnv when it is not nil), as a deployment runs them (two of
// those that scale out), and stops them when the test ends, showing their
// logs if it failed.
func (d *deployment) startWorkers(t *testing.T, bin string, env, agentEnv map[string]string) {
	for _, w := range []struct {
		cmd string
		n   int
	}{{"toolrunner", 1}, {"memory", 1}, {"outbound", 2}, {"approvals", 2}, {"agent", 2}, {"ingest", 1}} {
		for i := range w.n {
			wenv := env
			if w.cmd == "agent" && agentEnv != nil {
				wenv = agentEnv
			}
			wk := &worker{name: fmt.Sprintf("%s-%d", w.cmd, i+1), cmd: w.cmd, bin: bin, env: wenv, addr: freeAddr(t), logs: &syncBuffer{}}
			must(t, wk.start(t))
			d.workers = append(d.workers, wk)
			if w.cmd == "ingest" {
				d.ingest = wk
			}
		}
	}
	t.Cleanup(func() {
		for _, w := range d.workers {
			w.stop()
			if t.Failed() {
				t.Logf("%s log (last 4 KB):\n%s", w.name, tail(w.logs.String(), 4096))
			}
		}
	})
}

// awaitDrained waits up to within for every consumer to have nothing
// pending or unacknowledged, and returns how long it waited; a consumer
// still not drained then fails the test.
func (d *deployment) awaitDrained(ctx context.Context, t *testing.T, name string, within time.Duration) time.Duration {
	t.Helper()
	last := time.Now()
	drainedBy := time.Now().Add(within)
	for !d.drained(ctx) && time.Now().Before(drainedBy) {
		time.Sleep(100 * time.Millisecond)
	}
	waited := time.Since(last)
	if !d.drained(ctx) {
		t.Errorf("%s: consumers still have pending or unacknowledged messages %s after the last comment:\n%s",
			name, within, d.consumerReport(ctx))
	}
	return waited
}

// count counts the phase's issues with no comment and with more than one
// (logging each), and the slowest times from an issue's webhook, and from
// its approval click, to its first comment.
func (res *phaseResult) count(t *testing.T, d *deployment, watch *commentWatch, accepted []time.Time) {
	t.Helper()
	counts := watch.counts()
	for i := range watch.n {
		num := watch.first + i
		switch n := counts[num]; {
		case n == 0:
			res.lost++
			t.Logf("%s: issue #%d has no comment (webhook accepted at %s, clicked %v)", res.name, num,
				accepted[i].Format(time.TimeOnly), d.clickedAt(num))
		case n > 1:
			res.duplicated++
			t.Logf("%s: issue #%d has %d comments", res.name, num, n)
		}
		if at, ok := watch.firstSeen(num); ok {
			res.slowestWebhook = max(res.slowestWebhook, at.Sub(accepted[i]))
			if c := d.clickedAt(num); !c.IsZero() {
				res.slowestClick = max(res.slowestClick, at.Sub(c))
			}
		}
	}
}

// commentWatch notes when each of the issues first, first+1, ... first+n-1
// gets its first GitHub comment, and closes allSeen once all have one.
type commentWatch struct {
	gh       *fakes.GitHub
	first, n int
	allSeen  chan struct{}
	mu       sync.Mutex
	seen     map[int]time.Time
}

func newCommentWatch(gh *fakes.GitHub, first, n int) *commentWatch {
	return &commentWatch{gh: gh, first: first, n: n, allSeen: make(chan struct{}), seen: map[int]time.Time{}}
}

// counts returns the number of comments on each of the watched issues
// that has one.
func (w *commentWatch) counts() map[int]int {
	n := map[int]int{}
	for _, c := range w.gh.Comments() {
		if c.Number >= w.first && c.Number < w.first+w.n {
			n[c.Number]++
		}
	}
	return n
}

// run polls the comments until every watched issue has one or ctx ends.
func (w *commentWatch) run(ctx context.Context) {
	for ctx.Err() == nil {
		now := time.Now()
		w.mu.Lock()
		for num := range w.counts() {
			if _, ok := w.seen[num]; !ok {
				w.seen[num] = now
			}
		}
		n := len(w.seen)
		w.mu.Unlock()
		if n == w.n {
			close(w.allSeen)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstSeen returns when issue num's first comment was seen, if it was.
func (w *commentWatch) firstSeen(num int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.seen[num]
	return at, ok
}

// chaos kills a random worker about every p.every for p.faults and restarts
// it at once; at p.natsAt it stops NATS for p.natsDown.
func (d *deployment) chaos(t *testing.T, p faultParams) (kills, restarts int) {
	t.Helper()
	start := time.Now()
	natsDone := false
	for time.Since(start) < p.faults {
		time.Sleep(p.every/2 + rand.N(p.every))
		if !natsDone && time.Since(start) >= p.natsAt {
			natsDone = true
			d.nats.Stop()
			time.Sleep(p.natsDown)
			d.nats.Start()
			restarts++
			continue
		}
		w := d.workers[rand.N(len(d.workers))]
		w.kill()
		kills++
		t.Logf("killed %s at %s", w.name, time.Since(start).Round(time.Millisecond))
		if err := w.start(t); err != nil {
			t.Errorf("restart %s after a kill: %v", w.name, err)
		}
	}
	return kills, restarts
}

// sendIssue delivers an issues.opened webhook for issue num as GitHub does:
// retried with the same delivery id until the relay answers 200. It returns
// when the relay accepted it.
func (d *deployment) sendIssue(ctx context.Context, num int) time.Time {
	body, _ := openedIssue(d.payload, num, "fault")
	delivery := uuid.NewString()
	for ctx.Err() == nil {
		req := githubWebhook(ctx, "http://"+d.ingest.addr, e2eGHSecret, "issues", delivery, body)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now()
			}
		}
		time.Sleep(200 * time.Millisecond) // GitHub's redelivery, much faster
	}
	return time.Time{}
}

var targetNumber = regexp.MustCompile(`#(\d+)`)

// approveAll clicks Approve on every approval message as it appears, once
// per issue, as an approver watching the channel would; a click the relay
// does not accept is repeated.
func (d *deployment) approveAll(ctx context.Context) {
	done := map[string]bool{}
	for ctx.Err() == nil {
		for _, c := range d.slack.Calls("chat.postMessage") {
			if c.Params["channel"] != e2eChannel || len(c.Actions()) != 3 || done[c.Params["_ts"]] {
				continue
			}
			done[c.Params["_ts"]] = true
			m := targetNumber.FindStringSubmatch(c.Params["text"] + c.Params["blocks"])
			if m == nil {
				continue
			}
			num, _ := strconv.Atoi(m[1])
			go d.click(ctx, num, c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *deployment) click(ctx context.Context, num int, post fakes.SlackCall) {
	var approve fakes.Action
	for _, a := range post.Actions() {
		if strings.HasSuffix(a.ActionID, "approve") {
			approve = a
		}
	}
	d.mu.Lock()
	if _, ok := d.clicked[num]; !ok {
		d.clicked[num] = time.Now()
	}
	d.mu.Unlock()
	body := fakes.FormPayload(fakes.BlockActions(e2eTeam, e2eApprover, e2eChannel, post.Params["_ts"], "trig-"+uuid.NewString(), approve))
	for ctx.Err() == nil {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.ingest.addr+"/webhooks/slack/interactions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(slack.HeaderTimestamp, ts)
		req.Header.Set(slack.HeaderSignature, slack.SignatureHeader(e2eSlackSec, ts, body))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *deployment) clickedAt(num int) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.clicked[num]
}

// consumers lists every durable consumer of the relay's streams.
func (d *deployment) consumers(ctx context.Context) ([]*jetstream.ConsumerInfo, error) {
	var out []*jetstream.ConsumerInfo
	for _, stream := range []string{"RELAY_IN", "RELAY_WORK"} {
		s, err := d.js.Stream(ctx, stream)
		if err != nil {
			return nil, err
		}
		l := s.ListConsumers(ctx)
		for ci := range l.Info() {
			out = append(out, ci)
		}
		if err := l.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// drained reports whether every consumer has acked every message of its
// filter (bus.CaughtUp: exact, unlike the consumers' pending
// counts just after a publish).
func (d *deployment) drained(ctx context.Context) bool {
	cs, err := d.consumers(ctx)
	if err != nil {
		return false
	}
	for _, c := range cs {
		if ok, err := bus.CaughtUp(ctx, d.js, c); err != nil || !ok {
			return false
		}
	}
	return true
}

func (d *deployment) consumerReport(ctx context.Context) string {
	cs, err := d.consumers(ctx)
	if err != nil {
		return err.Error()
	}
	var b bytes.Buffer
	for _, c := range cs {
		fmt.Fprintf(&b, "  %s/%s: pending %d, ack pending %d, redelivered %d\n", c.Stream, c.Name, c.NumPending, c.NumAckPending, c.NumRedelivered)
	}
	return b.String()
}

func (d *deployment) deadLetters(ctx context.Context) int {
	s, err := d.js.Stream(ctx, "RELAY_DLQ")
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return -1
	}
	return int(info.State.Msgs)
}

// worker is one relay service process; kill and start replace the process
// on the same HTTP address.
type worker struct {
	name, cmd, bin, addr string
	env                  map[string]string
	logs                 *syncBuffer
	mu                   sync.Mutex
	proc                 *procs.Process // nil when not running
	dataDir              string
}

func (w *worker) start(t *testing.T) error {
	if w.dataDir == "" {
		w.dataDir = t.TempDir()
	}
	p, err := startService(t.Context(), w.bin, w.cmd, w.addr, w.dataDir, w.env, w.logs)
	if p != nil {
		w.mu.Lock()
		w.proc = p
		w.mu.Unlock()
	}
	return err
}

// kill ends the process without any chance to clean up, as a crash would.
func (w *worker) kill() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.proc != nil {
		w.proc.Kill()
		w.proc = nil
	}
}

// stop ends the process gracefully (SIGTERM), killing it after 20 s.
func (w *worker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.proc != nil {
		w.proc.Stop(20 * time.Second)
		w.proc = nil
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
