package servebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/mappers/github"
)

// FloodConfig bounds a flood run (`relay bench flood`): the whole relay with
// the agent on, N signed issues.opened webhooks for one repository at Rate,
// and beside them a trickle of webhooks for another repository (another
// owner and sender), whose latency is compared with the same trickle before
// the flood.
type FloodConfig struct {
	// Binary is the relay executable to run as the child (required).
	Binary string
	// N webhooks of the flood. Default 10,000, at most 100,000.
	N int
	// Rate of the flood in webhooks/s. Default 2,000, at most 20,000.
	Rate int
	// OtherRate of the other repository's webhooks/s. Default 5.
	OtherRate int
	// Env are extra settings of the child (RELAY_LIMIT_* for example).
	Env []string
	// DrainTimeout bounds the wait for the consumers after the flood.
	// Default 3m.
	DrainTimeout time.Duration
	// Progress, when set, gets a line per phase.
	Progress io.Writer
}

// FloodReport are a flood run's figures.
type FloodReport struct {
	N, Accepted, Errors int
	FloodSeconds        float64
	// RSS of the relay: idle before the flood, its peak, and after the
	// consumers caught up.
	IdleRSS, PeakRSS, AfterRSS int64
	// Tasks of the flooded repository whose suggestion reached Slack (the
	// digest included), and the model calls of the whole run.
	FloodSuggestions, ModelCalls int
	// Other repositories (one webhook each): accept and webhook-to-suggestion
	// latencies, before and during the flood (and its drain).
	Before, During OtherLatency
	Drain          time.Duration
}

// OtherLatency is the other repository's latencies in one phase.
type OtherLatency struct {
	Sent, Answered               int
	AcceptP50, AcceptP99         time.Duration
	SuggestionP50, SuggestionP99 time.Duration
}

// Write prints the report.
func (r *FloodReport) Write(w io.Writer) {
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Fprintf(w, "flood: %d webhooks for one repository, %d accepted, %d refused (503 busy: over the gateway's limit per source) in %.1fs\n", r.N, r.Accepted, r.Errors, r.FloodSeconds)
	fmt.Fprintf(w, "tasks of the flooded repository that reached Slack: %d; model calls in the run: %d\n", r.FloodSuggestions, r.ModelCalls)
	fmt.Fprintf(w, "RSS: idle %.1f MB, peak %.1f MB (%.2fx), after the drain %.1f MB (%.2fx); drain %s\n",
		mb(r.IdleRSS), mb(r.PeakRSS), float64(r.PeakRSS)/float64(max(r.IdleRSS, 1)), mb(r.AfterRSS),
		float64(r.AfterRSS)/float64(max(r.IdleRSS, 1)), r.Drain.Round(time.Millisecond))
	for _, p := range []struct {
		name string
		l    OtherLatency
	}{{"before the flood", r.Before}, {"during the flood", r.During}} {
		fmt.Fprintf(w, "other repositories %s: %d sent, %d answered; accept p50 %.1f ms p99 %.1f ms; to suggestion p50 %.1f ms p99 %.1f ms\n",
			p.name, p.l.Sent, p.l.Answered, ms(p.l.AcceptP50), ms(p.l.AcceptP99), ms(p.l.SuggestionP50), ms(p.l.SuggestionP99))
	}
}

// otherBody is the payload of issue n of another repository: each of its
// own, with an owner and sender of its own (as many teams' repositories
// would be), so no limit of the flooded one is shared.
func otherBody(n int) []byte {
	b := bytes.ReplaceAll(template, []byte("Codertocat"), []byte("Octo"+strconv.Itoa(n)))
	return bytes.Replace(b, []byte(sentinel), []byte(strconv.Itoa(n)), 1)
}

// Issue numbers: the flood's from floodBase, the other repository's from
// otherBase; the approval message names the number.
const (
	floodBase = 100_000
	otherBase = 900_000
)

// floodSender sends both repositories' webhooks and records their times.
type floodSender struct {
	*sender
	floodSeq, otherSeq atomic.Int64
	mu                 sync.Mutex
	otherAccept        map[int]time.Duration
	floodArrived       int
}

func (s *floodSender) post(ctx context.Context, b []byte) (time.Duration, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	github.SetHeaders(req.Header, "issues", uuid.NewString(), "1", github.Sign([]byte(webhookSecret), b))
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("webhook answered %d, want 200", resp.StatusCode)
	}
	return time.Since(start), nil
}

func (s *floodSender) sendFlood(ctx context.Context) error {
	n := floodBase + int(s.floodSeq.Add(1))
	_, err := s.post(ctx, bytes.Replace(template, []byte(sentinel), []byte(strconv.Itoa(n)), 1))
	return err
}

func (s *floodSender) sendOther(ctx context.Context) error {
	n := otherBase + int(s.otherSeq.Add(1))
	d, err := s.post(ctx, otherBody(n))
	if err != nil {
		return err
	}
	s.mark(s.accepted, n)
	s.mu.Lock()
	s.otherAccept[n] = d
	s.mu.Unlock()
	return nil
}

var anyIssueRef = regexp.MustCompile(`#(\d+)`)

func (s *floodSender) onSlack(c fakes.SlackCall) {
	if c.Method != "chat.postMessage" || c.Params["channel"] != approvalChannel {
		return
	}
	m := anyIssueRef.FindStringSubmatch(c.Params["text"])
	if m == nil {
		return
	}
	n, _ := strconv.Atoi(m[1])
	switch {
	case n >= otherBase:
		s.mark(s.arrived, n)
	case n >= floodBase:
		s.mu.Lock()
		s.floodArrived++
		s.mu.Unlock()
	}
}

// otherLatency summarises the other repository's issues in [from, to).
func (s *floodSender) otherLatency(from, to int) OtherLatency {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sender.mu.Lock()
	defer s.sender.mu.Unlock()
	var l OtherLatency
	var acc, sug []time.Duration
	for n := from; n < to; n++ {
		d, ok := s.otherAccept[n]
		if !ok {
			continue
		}
		l.Sent++
		acc = append(acc, d)
		if t1, ok := s.arrived[n]; ok {
			l.Answered++
			sug = append(sug, t1.Sub(s.accepted[n]))
		}
	}
	slices.Sort(acc)
	slices.Sort(sug)
	l.AcceptP50, l.AcceptP99 = pct(acc, 50), pct(acc, 99)
	l.SuggestionP50, l.SuggestionP99 = pct(sug, 50), pct(sug, 99)
	return l
}

// Flood runs the flood benchmark once.
func Flood(ctx context.Context, cfg FloodConfig) (*FloodReport, error) {
	cfg.N = cmpPositive(cfg.N, 10_000)
	cfg.Rate = cmpPositive(cfg.Rate, 2000)
	cfg.OtherRate = cmpPositive(cfg.OtherRate, 5)
	cfg.DrainTimeout = cmpPositive(cfg.DrainTimeout, 3*time.Minute)
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	switch {
	case cfg.Binary == "":
		return nil, errors.New("servebench: no relay binary to run")
	case cfg.N > 100_000 || cfg.Rate > 20_000 || cfg.OtherRate > 100:
		return nil, fmt.Errorf("flood of %d at %d/s, other %d/s: at most 100,000 at 20,000/s, other 100/s", cfg.N, cfg.Rate, cfg.OtherRate)
	}
	dir, err := os.MkdirTemp("", "relay-bench-flood-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	f := newFakes()
	defer f.close()
	var calls atomic.Int64
	f.llm = fakes.NewLLM(&f.owner, func(*fakes.ChatRequest) fakes.Reply {
		calls.Add(1)
		return fakes.Reply{Text: "Thanks for the report, we will look into it."}
	})
	c, err := startFloodChild(ctx, cfg, dir, f)
	if err != nil {
		return nil, err
	}
	var rep FloodReport
	defer func() { _ = c.Stop() }()
	nc, err := nats.Connect(c.natsURL, nats.Name("relay-bench-flood"))
	if err != nil {
		return nil, fmt.Errorf("connect to the relay's NATS at %s: %w", c.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s := &floodSender{sender: newSender(c.base, false), otherAccept: map[int]time.Duration{}}
	defer s.client.CloseIdleConnections()
	f.slack.OnCall(s.onSlack)

	// Idle, then the other repository alone.
	time.Sleep(2 * time.Second) // settle: the idle figure is a level, not an event to wait for
	if rep.IdleRSS, err = c.RSS(); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "idle RSS %d MB; the other repository alone...\n", rep.IdleRSS>>20)
	other := func(ctx context.Context, d time.Duration) error {
		p, err := openLoop(ctx, "other repository", cfg.OtherRate, d, s.sendOther)
		if err == nil && p.Errors > 0 {
			err = fmt.Errorf("other repository: %d webhooks refused", p.Errors)
		}
		return err
	}
	if err := other(ctx, 5*time.Second); err != nil {
		return nil, err
	}
	beforeEnd := otherBase + int(s.otherSeq.Load()) + 1
	if err := waitFor(ctx, time.Minute, func() bool { return s.otherLatency(otherBase, beforeEnd).Answered == beforeEnd-otherBase-1 }); err != nil {
		return nil, fmt.Errorf("the other repository's suggestions before the flood: %w", err)
	}

	// The flood, the other repository's trickle beside it, RSS sampled.
	fmt.Fprintf(cfg.Progress, "flood of %d webhooks at %d/s...\n", cfg.N, cfg.Rate)
	sctx, stopSampling := context.WithCancel(ctx)
	peak := make(chan int64, 1)
	go func() {
		var p int64
		for sctx.Err() == nil {
			if r, err := c.RSS(); err == nil {
				p = max(p, r)
			}
			select {
			case <-sctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		peak <- p
	}()
	octx, stopOther := context.WithCancel(ctx)
	otherDone := make(chan error, 1)
	go func() { otherDone <- other(octx, time.Hour) }()
	d := time.Duration(float64(cfg.N) / float64(cfg.Rate) * float64(time.Second))
	start := time.Now()
	ph, err := ingestbench.OpenLoop(ctx, "flood", cfg.Rate, d+time.Second, cfg.N, s.sendFlood)
	rep.FloodSeconds = time.Since(start).Seconds()
	stopped := time.Now()
	if err != nil {
		stopOther()
		stopSampling()
		return nil, err
	}
	rep.N, rep.Accepted, rep.Errors = cfg.N, ph.Requests, ph.Errors
	// The trickle goes on while the relay drains, then stops.
	dr, derr := waitDrained(ctx, js, c, stopped, cfg.DrainTimeout, func() bool { return true })
	stopOther()
	if err := <-otherDone; err != nil && !errors.Is(err, context.Canceled) {
		stopSampling()
		return nil, err
	}
	duringEnd := otherBase + int(s.otherSeq.Load()) + 1
	_ = waitFor(ctx, 30*time.Second, func() bool {
		return s.otherLatency(beforeEnd, duringEnd).Answered == s.otherLatency(beforeEnd, duringEnd).Sent
	})
	stopSampling()
	rep.PeakRSS = <-peak
	if derr != nil {
		return nil, fmt.Errorf("%w; the relay's log:\n%s", derr, c.Logs())
	}
	rep.Drain = dr.after
	if rep.AfterRSS, err = c.RSS(); err != nil {
		return nil, err
	}
	rep.Before, rep.During = s.otherLatency(otherBase, beforeEnd), s.otherLatency(beforeEnd, duringEnd)
	s.mu.Lock()
	rep.FloodSuggestions = s.floodArrived
	s.mu.Unlock()
	rep.ModelCalls = int(calls.Load())
	return &rep, nil
}

// openLoop sends op at rate for d (ingestbench.OpenLoop).
func openLoop(ctx context.Context, name string, rate int, d time.Duration, op func(context.Context) error) (ingestbench.Phase, error) {
	return ingestbench.OpenLoop(ctx, name, rate, d, int(d.Seconds()*float64(rate))+1, op)
}

// startFloodChild runs `relay serve` with the agent and cfg.Env in dir and
// waits until it is ready.
func startFloodChild(ctx context.Context, cfg FloodConfig, dir string, f *fakeSet) (*child, error) {
	env, err := childEnv(dir, f, true)
	if err != nil {
		return nil, err
	}
	env = append(env, cfg.Env...)
	c := &child{}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "RELAY_HTTP_ADDR="); ok {
			c.base = "http://" + v
		}
		if v, ok := strings.CutPrefix(kv, "RELAY_NATS_LISTEN="); ok {
			c.natsURL = "nats://" + v
		}
	}
	cmd := exec.Command(cfg.Binary, "serve")
	cmd.Env = env
	if c.Process, err = Start(ctx, cmd, c.base+"/readyz"); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return c, nil
}

// RSS is the process's resident set size (Linux /proc).
func (p *Process) RSS() (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.proc.Pid()))
	if err != nil {
		return 0, fmt.Errorf("RSS (needs Linux /proc): %w", err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("RSS: no VmRSS in /proc status")
}

// waitFor polls cond every 50ms until it holds or within has passed.
func waitFor(ctx context.Context, within time.Duration, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func cmpPositive[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
