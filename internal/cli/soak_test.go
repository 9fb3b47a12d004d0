package cli

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/github"
)

var (
	soakLong    = flag.Bool("soak.long", false, "TestSoak: 1,000 webhooks/s for 60 s instead of the short CI form")
	soakHeapDir = flag.String("soak.heapprofile", "", "TestSoak: write heap profiles start.pb.gz and end.pb.gz to this directory")
)

// Budgets of the embedded NATS server's heap growth in TestSoak: a fixed
// part (message block buffers and caches of the streams being written) and a
// part per webhook (its message id in the de-duplication window, the id key
// of its turn in the session bucket and that key's place in the store's
// subject index; measured: 0.6-0.9 kB).
const (
	soakServerFixed      = 48 << 20
	soakServerPerWebhook = 2 << 10
)

// TestSoak drives `relay serve` (embedded NATS, every worker in one process)
// with signed GitHub webhooks at a fixed rate and samples the process's
// goroutines, resident memory and live heap (after a GC) once a second. Every
// webhook must be answered 200, and what must be flat is: goroutines, and the
// live heap of everything but the embedded NATS server. The embedded server
// keeps data by design that grows with every webhook until it expires (the
// de-duplication window's message ids, the session bucket's id keys and the
// per-subject index of its store); its heap is reported per webhook and held
// to a budget, and resident memory, which includes it, is reported only.
// The short form runs in CI; `go test ./internal/cli -run TestSoak -v
// -timeout 10m -args -soak.long` runs 1,000/s for 60 s, and
// -soak.heapprofile=DIR writes heap profiles at the start and the end
// (`go tool pprof -top -diff_base DIR/start.pb.gz DIR/end.pb.gz`).
//
// Not parallel: goroutines and the heap are the whole test process's, so no
// other test may run beside it (top-level parallel tests start only after
// every sequential one has finished).
func TestSoak(t *testing.T) {
	testenv.SkipShort(t, "the soak")
	rate, d := 200, 12*time.Second
	if *soakLong {
		rate, d = 1000, 60*time.Second
	}
	env := embeddedEnv(t)
	env["GITHUB_WEBHOOK_SECRET"] = "soak-secret"
	env["RELAY_LOG_LEVEL"] = "warn"
	// The console follows the bus only while it is looked at (nobody does
	// here); then it keeps the last RELAY_CONSOLE_RECENT envelopes by design
	// (a ring, bounded), and a small ring is full within the first second,
	// so what the soak sees growing is not the console filling up.
	env["RELAY_CONSOLE_RECENT"] = "100"
	defer serveReady(t, env, nil, 30*time.Second)()
	base := "http://" + env["RELAY_HTTP_ADDR"]

	snd := newSoakSender(base, env["GITHUB_WEBHOOK_SECRET"], 64)
	defer snd.client.CloseIdleConnections()
	var smp soakSamples
	writeHeapProfile(t, "start")
	startServer, _ := heapSplit()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	sample := time.NewTicker(time.Second)
	end := time.After(d)
loop:
	for {
		select {
		case <-tick.C:
			snd.offer()
		case <-sample.C:
			smp.take(t)
		case <-end:
			break loop
		}
	}
	tick.Stop()
	sample.Stop()
	snd.stop()
	writeHeapProfile(t, "end")
	endServer, _ := heapSplit()

	sent, failed := snd.sent.Load(), snd.failed.Load()
	t.Logf("%d webhooks at %d/s for %s, %d failed; goroutines %v; RSS MiB %v; live heap MiB: relay %v, embedded NATS server %v",
		sent, rate, d, failed, smp.goroutines, mib(smp.rss), mib(smp.relayHeap), mib(smp.serverHeap))
	if failed > 0 {
		t.Errorf("%d of %d webhooks not answered 200 (first: %v)", failed, sent, snd.firstErr.Load())
	}
	smp.checkFlat(t)
	grew := max(endServer-startServer, 0)
	t.Logf("embedded NATS server heap grew %.1f MiB: %.0f bytes per webhook", float64(grew)/(1<<20), float64(grew)/float64(sent))
	if budget := soakServerFixed + soakServerPerWebhook*sent; grew > budget {
		t.Errorf("embedded NATS server heap grew %.1f MiB, over the budget of %.1f MiB for %d webhooks",
			float64(grew)/(1<<20), float64(budget)/(1<<20), sent)
	}
}

// soakSender posts signed GitHub webhooks from a pool of workers: an open
// loop, each offer one webhook, at most the pool's size in flight.
type soakSender struct {
	client       *http.Client
	url, sig     string
	body         []byte
	jobs         chan struct{}
	wg           sync.WaitGroup
	sent, failed atomic.Int64
	firstErr     atomic.Value
}

func newSoakSender(base, secret string, workers int) *soakSender {
	body := ingestbench.Payload()
	s := &soakSender{
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}},
		url:    base + "/webhooks/github", body: body, sig: github.Sign([]byte(secret), body),
		jobs: make(chan struct{}, 1024),
	}
	for range workers {
		s.wg.Go(func() {
			for range s.jobs {
				s.fail(s.send())
			}
		})
	}
	return s
}

// offer queues one webhook; a full queue (the relay more than a second of
// work behind) counts as a failure.
func (s *soakSender) offer() {
	select {
	case s.jobs <- struct{}{}:
	default:
		s.fail(errors.New("sender backlog full"))
	}
}

func (s *soakSender) send() error {
	req, _ := http.NewRequest(http.MethodPost, s.url, bytes.NewReader(s.body))
	github.SetHeaders(req.Header, "issues", uuid.NewString(), "1", s.sig)
	s.sent.Add(1)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (s *soakSender) fail(err error) {
	if err != nil {
		s.failed.Add(1)
		s.firstErr.CompareAndSwap(nil, err.Error())
	}
}

// stop waits for the webhooks in flight.
func (s *soakSender) stop() {
	close(s.jobs)
	s.wg.Wait()
}

// soakSamples are the process's figures, sampled once a second.
type soakSamples struct {
	goroutines, rss, relayHeap, serverHeap []float64
}

func (m *soakSamples) take(t *testing.T) {
	m.goroutines = append(m.goroutines, float64(runtime.NumGoroutine()))
	m.rss = append(m.rss, float64(residentBytes(t)))
	server, relay := heapSplit()
	m.serverHeap = append(m.serverHeap, float64(server))
	m.relayHeap = append(m.relayHeap, float64(relay))
}

// checkFlat compares the last third of the samples with the middle third,
// with a margin for noise (GC timing, connection churn).
func (m *soakSamples) checkFlat(t *testing.T) {
	t.Helper()
	third := len(m.goroutines) / 3
	if third < 2 {
		t.Fatalf("only %d samples", len(m.goroutines))
	}
	mid, last := median(m.goroutines[third:2*third]), median(m.goroutines[2*third:])
	if last > mid*1.2+20 {
		t.Errorf("goroutines grew: median %.0f in the middle third, %.0f in the last", mid, last)
	}
	// The heap estimate is sampled (one sample per 512 kB allocated), hence
	// the margin: samples of a run vary by up to 1 MiB; a leak of 4 kB per
	// webhook adds 3 MiB between the medians of the short form.
	midHeap, lastHeap := median(m.relayHeap[third:2*third]), median(m.relayHeap[2*third:])
	if lastHeap > midHeap+2<<20 {
		t.Errorf("relay heap grew: median %.1f MiB in the middle third, %.1f MiB in the last", midHeap/(1<<20), lastHeap/(1<<20))
	}
}

// heapSplit collects garbage and estimates the live heap from the memory
// profile, split between allocations made inside the embedded NATS server
// and all others. Profile records are samples; each is scaled as pprof does.
func heapSplit() (server, relay int64) {
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for {
		n, ok := runtime.MemProfile(recs, false)
		if ok {
			recs = recs[:n]
			break
		}
		recs = make([]runtime.MemProfileRecord, n+64)
	}
	rate := float64(runtime.MemProfileRate)
	for _, r := range recs {
		if r.InUseBytes() == 0 {
			continue
		}
		bytes := float64(r.InUseBytes())
		if rate > 1 && r.AllocObjects > 0 {
			size := float64(r.AllocBytes) / float64(r.AllocObjects)
			bytes /= 1 - math.Exp(-size/rate)
		}
		if inNATSServer(r.Stack()) {
			server += int64(bytes)
		} else {
			relay += int64(bytes)
		}
	}
	return server, relay
}

func inNATSServer(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/nats-io/nats-server/") {
			return true
		}
		if !more {
			return false
		}
	}
}

// writeHeapProfile writes DIR/name.pb.gz when -soak.heapprofile=DIR is set.
func writeHeapProfile(t *testing.T, name string) {
	if *soakHeapDir == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(filepath.Join(*soakHeapDir, name+".pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		t.Fatal(err)
	}
}

// residentBytes is this process's resident set size (Linux).
func residentBytes(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		testenv.Missing(t, "/proc/self/status (Linux procfs) to read the resident set: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// mib converts bytes to MiB, rounded to 0.1.
func mib(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Round(x/(1<<20)*10) / 10
	}
	return out
}
