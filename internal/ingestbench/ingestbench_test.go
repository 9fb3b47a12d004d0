package ingestbench_test

import (
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/ingestbench"
)

// TestRunShort runs every phase briefly: all requests succeed and the report
// names each phase. It measures nothing about speed.
func TestRunShort(t *testing.T) {
	t.Parallel()
	rep, err := ingestbench.Run(t.Context(), ingestbench.Config{Concurrency: 4, Duration: 300 * time.Millisecond, Rate: 200, MaxRequests: 2000, DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, p := range []ingestbench.Phase{rep.Saturation, rep.FixedRate, rep.HTTPCeiling, rep.NATSCeiling} {
		if p.Requests == 0 || p.Errors != 0 {
			t.Errorf("%s: got %d requests and %d errors, want some and none", p.Name, p.Requests, p.Errors)
		}
	}
	var out strings.Builder
	rep.Write(&out)
	if !strings.Contains(out.String(), "gateway at 200/s") {
		t.Errorf("report lacks the fixed-rate phase:\n%s", out.String())
	}
}

func TestConfigBounds(t *testing.T) {
	t.Parallel()
	cases := []ingestbench.Config{
		{Concurrency: 5000},
		{Duration: time.Hour},
		{MaxRequests: 10_000_000},
		{Rate: 1_000_000},
	}
	for _, c := range cases {
		if _, err := ingestbench.Run(t.Context(), c); err == nil {
			t.Errorf("Run(%+v): got nil error, want a bound refused", c)
		}
	}
}
