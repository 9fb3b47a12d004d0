package cli

import (
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/internal/fakes"
)

// BenchmarkWebhookToSuggestion measures the whole loop with instant fakes:
// from the gateway accepting a signed GitHub issues.opened webhook (its 200)
// to the approval message with the agent's suggestion arriving at Slack, at
// a sustained 100 tasks/s. Every task crosses ingest -> agent -> tool runner
// (the real MCP echo tool over stdio) -> agent -> approvals -> Slack, plus the
// memory worker's context lookup.
//
//	go test ./internal/cli -run '^$' -bench WebhookToSuggestion -benchtime 1000x
//
// The Burn variant runs the same with a child process looping on one core
// (pinned to CPU 0 with taskset where there is one), as other work on the
// machine would.
func BenchmarkWebhookToSuggestion(b *testing.B) {
	b.Run("idle", func(b *testing.B) { benchLoop(b) })
	b.Run("burn", func(b *testing.B) {
		burnCore(b)
		benchLoop(b)
	})
}

// burnCore keeps one core busy with a child process until the benchmark ends.
func burnCore(b *testing.B) {
	args := []string{"sh", "-c", "while :; do :; done"}
	if path, err := exec.LookPath("taskset"); err == nil {
		args = append([]string{path, "-c", "0"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the CPU burner: %v", err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// benchLoop drives the loop at 100 tasks/s and reports its latencies.
func benchLoop(b *testing.B) {
	s := startStack(b, nil)
	var mu sync.Mutex
	done := make(chan struct{}, b.N+16)
	accepted := map[string]time.Time{}
	arrived := map[string]time.Time{}
	var lat []time.Duration
	// match records a latency once both ends of a task are known.
	match := func(key string) {
		t0, ok1 := accepted[key]
		t1, ok2 := arrived[key]
		if ok1 && ok2 {
			lat = append(lat, t1.Sub(t0))
			delete(accepted, key)
			delete(arrived, key)
			done <- struct{}{}
		}
	}
	num := regexp.MustCompile(`#(\d+)`)
	s.slack.OnCall(func(c fakes.SlackCall) {
		if c.Method != "chat.postMessage" || c.Params["channel"] != e2eChannel {
			return
		}
		at := time.Now()
		m := num.FindStringSubmatch(c.Params["text"])
		if m == nil {
			return
		}
		mu.Lock()
		if _, dup := arrived[m[1]]; !dup {
			arrived[m[1]] = at
			match(m[1])
		}
		mu.Unlock()
	})
	// The signed webhooks are built before the clock starts: the sender's
	// JSON and HMAC work is not the relay's.
	payload := issuesOpenedPayload(b)
	reqs := make([]*http.Request, b.N)
	for i := range b.N {
		body, _ := openedIssue(payload, 100000+i, "bench")
		reqs[i] = githubWebhook(b.Context(), s.base, e2eGHSecret, "issues", uuid.NewString(), body)
	}
	const rate = 100
	interval := time.Second / rate
	cpu0 := processCPU(b)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range b.N {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.send(reqs[i])
			key := strconv.Itoa(100000 + i)
			at := time.Now()
			mu.Lock()
			accepted[key] = at
			match(key)
			mu.Unlock()
		}()
	}
	wg.Wait()
	timeout := time.After(60 * time.Second)
	for range b.N {
		select {
		case <-done:
		case <-timeout:
			b.Fatalf("only %d of %d suggestions arrived", len(lat), b.N)
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/task")
}

// processCPU is this process's user + system CPU time so far (the relay, its
// embedded NATS server, the fakes and the load; not the MCP server's process).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
