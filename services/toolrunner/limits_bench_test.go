package toolrunner

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/toolstest"
)

// BenchmarkSharedLimits compares, in one run on the same in-process MCP
// server, a raw SDK call (the ceiling), a runner call with the limits in
// process (MemoryLimits) and one with the limits shared on an embedded
// JetStream (KVLimits): session count, daily quota and a concurrency slot.
// It reports the p50 of each and what the shared state adds.
//
//	go test ./services/toolrunner -run '^$' -bench SharedLimits -benchtime 2000x
func BenchmarkSharedLimits(b *testing.B) {
	url, _ := mcpServer(b)
	bb := bustest.Embedded(b)
	kv, err := OpenLimits(context.Background(), bb, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	mem := benchRunner(b, url, tools.NewMemoryLimits())
	shared := benchRunner(b, url, kv)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	ctx := context.Background()
	args := map[string]any{"message": "benchmark"}
	req := tools.Request{Tool: "svc.echo", Args: args, Thread: "bench:thread", Caller: tools.Caller{Role: "agent"}}
	paths := []func() error{
		func() error {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
			return err
		},
		func() error { return mem.Call(ctx, req).Err },
		func() error { return shared.Call(ctx, req).Err },
	}
	durs := make([][]time.Duration, len(paths))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range paths {
			p := (i + k) % len(paths) // rotate the order
			t0 := time.Now()
			if err := paths[p](); err != nil {
				b.Fatal(err)
			}
			durs[p] = append(durs[p], time.Since(t0))
		}
	}
	b.StopTimer()
	p50s := make([]float64, len(paths))
	for k, d := range durs {
		slices.Sort(d)
		p50s[k] = float64(d[len(d)/2].Nanoseconds()) / 1e3
	}
	b.ReportMetric(p50s[0], "raw-p50-µs")
	b.ReportMetric(p50s[1], "memory-p50-µs")
	b.ReportMetric(p50s[2], "shared-p50-µs")
	b.ReportMetric(p50s[2]-p50s[1], "shared-added-µs")
}

func benchRunner(b *testing.B, url string, lim tools.LimitStore) *tools.Runner {
	b.Helper()
	pol := toolstest.Policy(b, "roles:\n  - role: agent\n    capabilities: ['svc.*']\nbudgets:\n  svc.echo: {daily_quota: 1000000000}\n")
	pol.Limits.PerSession = 1 << 30 // counted, never reached
	return svcRunner(b, url, pol, lim, nil)
}
