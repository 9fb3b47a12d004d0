package tools

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// benchRunner starts a runner on the everything server over stdio with a
// policy that exercises every check (capability, rate, quota, concurrency)
// and an audit log, and returns it with its own session to the same server.
func benchRunner(b *testing.B) (*Runner, *mcp.ClientSession) {
	b.Helper()
	srv := everythingStdio(b, "everything")
	pol, err := mcpconfig.ParsePolicy([]byte(`
roles:
  - role: agent
    capabilities: ["everything.echo"]
budgets:
  everything: {rps: 1000000, burst: 1000000, concurrency: 100}
  everything.echo: {daily_quota: 1000000000, timeout: 30s}
limits: {concurrency: 100}
`))
	if err != nil {
		b.Fatal(err)
	}
	r := startRunner(b, Config{Servers: []mcpconfig.Server{srv}, Policy: pol, AuditPath: filepath.Join(b.TempDir(), "audit.jsonl"), HealthInterval: time.Minute})
	c := r.conns["everything"]
	c.mu.Lock()
	s := c.session
	c.mu.Unlock()
	return r, s
}

// BenchmarkEchoStdio compares, in one run on the same session, a call
// through the runner (capability check, budgets, breaker, schema validation,
// redaction, audit) with a raw SDK CallTool. It reports the p50 of each, the
// ratio and the added microseconds.
//
//	go test ./tools -run '^$' -bench EchoStdio -benchtime 3000x
func BenchmarkEchoStdio(b *testing.B) {
	r, s := benchRunner(b)
	ctx := context.Background()
	args := map[string]any{"message": "benchmark"}
	req := Request{Tool: "everything.echo", Args: args, Caller: Caller{AgentID: "bench", Role: "agent"}}
	raw := func() error {
		_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
		return err
	}
	viaRunner := func() error { return r.Call(ctx, req).Err }
	for range 200 { // warm up both paths
		_ = raw()
		_ = viaRunner()
	}

	b.Run("sequential", func(b *testing.B) {
		rawD := make([]time.Duration, 0, b.N)
		runD := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			// Alternate the order so neither path always runs second.
			first, second, fd, sd := raw, viaRunner, &rawD, &runD
			if i%2 == 1 {
				first, second, fd, sd = viaRunner, raw, &runD, &rawD
			}
			t0 := time.Now()
			if err := first(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := second(); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			*fd = append(*fd, t1.Sub(t0))
			*sd = append(*sd, t2.Sub(t1))
		}
		b.StopTimer()
		pr, pu := p50(rawD), p50(runD)
		b.ReportMetric(float64(pr.Nanoseconds())/1e3, "raw-p50-µs")
		b.ReportMetric(float64(pu.Nanoseconds())/1e3, "runner-p50-µs")
		b.ReportMetric(float64(pu)/float64(pr), "ratio")
		b.ReportMetric(float64((pu-pr).Nanoseconds())/1e3, "added-µs")
	})
	for _, mode := range []struct {
		name string
		call func() error
	}{{"parallel25/raw", raw}, {"parallel25/runner", viaRunner}} {
		b.Run(mode.name, func(b *testing.B) {
			const callers = 25
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			b.ResetTimer()
			start := time.Now()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if err := mode.call(); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
		})
	}
}

func p50(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
