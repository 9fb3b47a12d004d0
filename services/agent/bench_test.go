package agent

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
)

// loopReply answers like a model that calls everything.echo once and then
// answers: stateless, so concurrent tasks can share it.
func loopReply(w http.ResponseWriter, r *fakes.ChatRequest) {
	if r.LastTool() == "" {
		callTool("everything__echo", map[string]any{"message": "bench"})(w, r)
		return
	}
	say("Benchmark answer [[ref:mem-readme]].")(w, r)
}

// BenchmarkTaskLatency measures one task from the trigger's publish to the
// suggestion on agent.suggestion, across every bus hop (in.> -> agent ->
// tool.call -> runner -> tool.result -> agent -> agent.suggestion), with an
// instant model, tool runner and memory, triggers paced at 100 per second.
// It reports p50 and p99 in milliseconds.
//
//	go test ./services/agent -run '^$' -bench TaskLatency -benchtime 500x
func BenchmarkTaskLatency(b *testing.B) {
	h := setup(b, []reply{loopReply}, withConfig(func(c *Config) { c.Concurrency = 32 }))
	var (
		mu    sync.Mutex
		start = make(map[string]time.Time, b.N)
		lat   = make([]time.Duration, 0, b.N)
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(lat) < b.N {
			select {
			case e := <-h.out:
				if e.Role != envelope.RoleAssistant {
					b.Errorf("got %s: %s", e.Role, e.Content)
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(start[e.Meta.TaskID]))
				mu.Unlock()
			case <-time.After(30 * time.Second):
				b.Errorf("no suggestion for 30s (%d of %d)", len(lat), b.N)
				return
			}
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for range b.N {
		<-tick.C
		e := githubIssueOpened()
		mu.Lock()
		start[TaskID(e.ID)] = time.Now()
		mu.Unlock()
		h.publish(b, "in.github.issues", e)
	}
	<-done
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
