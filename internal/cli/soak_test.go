package cli

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/ingestbench"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/github"
)

var soakLong = flag.Bool("soak.long", false, "TestSoak: 1,000 webhooks/s for 60 s instead of the short CI form")

// TestSoak drives `relay serve` (embedded NATS, every worker in one process)
// with signed GitHub webhooks at a fixed rate and samples the process's
// goroutines and resident memory once a second: both must stay flat once
// warmed up, and every webhook must be answered 200. The short form runs in
// CI; `go test ./internal/cli -run TestSoak -v -timeout 10m -args -soak.long`
// runs 1,000/s for 60 s.
func TestSoak(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "the soak")
	rate, d := 200, 12*time.Second
	if *soakLong {
		rate, d = 1000, 60*time.Second
	}
	env := embeddedEnv(t)
	env["GITHUB_WEBHOOK_SECRET"] = "soak-secret"
	env["RELAY_LOG_LEVEL"] = "warn"
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() { done <- Run(ctx, nil, config.FromMap(env), &syncBuffer{}, &syncBuffer{}) }()
	defer func() { cancel(); <-done }()
	base := "http://" + env["RELAY_HTTP_ADDR"]
	waitHTTP(t, base+"/readyz", http.StatusOK, 30*time.Second)

	body := ingestbench.Payload()
	sig := github.Sign([]byte(env["GITHUB_WEBHOOK_SECRET"]), body)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	send := func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/webhooks/github", bytes.NewReader(body))
		req.Header.Set(github.HeaderEvent, "issues")
		req.Header.Set(github.HeaderDelivery, uuid.NewString())
		req.Header.Set(github.HeaderHookID, "1")
		req.Header.Set(github.HeaderSignature256, sig)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		sent.Add(1)
		if err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
		}
	}

	// An open loop at the rate, at most 64 requests in flight.
	jobs := make(chan struct{}, 1024)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range jobs {
				send()
			}
		})
	}
	var goroutines, rss []float64
	tick := time.NewTicker(time.Second / time.Duration(rate))
	sample := time.NewTicker(time.Second)
	end := time.After(d)
loop:
	for {
		select {
		case <-tick.C:
			select {
			case jobs <- struct{}{}:
			default: // the relay is behind by more than a second of work
				failed.Add(1)
				firstErr.CompareAndSwap(nil, "sender backlog full")
			}
		case <-sample.C:
			goroutines = append(goroutines, float64(runtime.NumGoroutine()))
			rss = append(rss, float64(residentBytes(t)))
		case <-end:
			break loop
		}
	}
	tick.Stop()
	sample.Stop()
	close(jobs)
	wg.Wait()

	t.Logf("%d webhooks at %d/s for %s, %d failed; goroutines %v; RSS MiB %v", sent.Load(), rate, d, failed.Load(),
		goroutines, mib(rss))
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d webhooks not answered 200 (first: %v)", n, sent.Load(), firstErr.Load())
	}
	// Flat: the last third of the samples no higher than the middle third
	// plus a margin for noise (GC timing, connection churn).
	third := len(goroutines) / 3
	if third < 2 {
		t.Fatalf("only %d samples", len(goroutines))
	}
	mid, last := median(goroutines[third:2*third]), median(goroutines[2*third:])
	if last > mid*1.2+20 {
		t.Errorf("goroutines grew: median %.0f in the middle third, %.0f in the last", mid, last)
	}
	midRSS, lastRSS := median(rss[third:2*third]), median(rss[2*third:])
	if lastRSS > midRSS*1.25 {
		t.Errorf("resident memory grew: median %.0f MiB in the middle third, %.0f MiB in the last", midRSS/(1<<20), lastRSS/(1<<20))
	}
}

// residentBytes is this process's resident set size (Linux).
func residentBytes(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
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

func mib(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x / (1 << 20))
	}
	return out
}
