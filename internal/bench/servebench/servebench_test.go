package servebench

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/internal/testenv"
)

func TestConfigBounds(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]Config{
		"no binary": {},
		"rate":      {Binary: "relay", Rate: 1_000_000},
		"duration":  {Binary: "relay", Duration: time.Hour},
		"runs":      {Binary: "relay", Runs: 1000},
		"service":   {Binary: "relay", Targets: []Target{{Name: "x", Service: "agent"}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := Run(t.Context(), c); err == nil {
				t.Errorf("Run(%+v): got nil error, want the bound refused", c)
			}
		})
	}
}

// TestReportMediansAndRatios: the report gives each figure's median and
// range over the runs, and the CPU ratio to the gateway run by run.
func TestReportMediansAndRatios(t *testing.T) {
	t.Parallel()
	gw, serve := Targets[0], Targets[1]
	res := func(tg Target, cpu time.Duration) Result {
		return Result{Target: tg, CPU: cpu, Accept: ingestbench.Phase{Requests: 1000, Elapsed: time.Second},
			Stored: map[string]uint64{"RELAY_IN": 1000}, Delivered: map[string]uint64{"memory-in": 500}}
	}
	rep := &Report{Rate: 1000, Duration: time.Second, Results: []Result{
		res(gw, 400*time.Millisecond), res(serve, 600*time.Millisecond),
		res(gw, 500*time.Millisecond), res(serve, 1000*time.Millisecond),
		res(gw, 300*time.Millisecond), res(serve, 600*time.Millisecond),
	}}
	ratios := rep.CPURatio(serve)
	want := []float64{1.5, 2, 2}
	for i := range want {
		if len(ratios) != len(want) || ratios[i] != want[i] {
			t.Fatalf("CPURatio: got %v, want %v", ratios, want)
		}
	}
	var out strings.Builder
	rep.Write(&out)
	for _, line := range []string{
		"CPU ms per 1,000 webhooks        400  [300-500]",
		"CPU ms per 1,000 webhooks        600  [600-1000]",
		"x the gateway's, same run      2.00  [1.50-2.00]",
		"stored/webhook RELAY_IN        1.00  [1.00-1.00]",
		"deliveries/webhook memory-in   0.50  [0.50-0.50]",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, out.String())
		}
	}
}

func TestProcCPU(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testenv.Missing(t, "Linux /proc (%v)", err)
	}
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Errorf("own CPU time: %v", err)
	}
	if _, err := procCPU(1 << 30); err == nil || !strings.Contains(err.Error(), "/proc") {
		t.Errorf("CPU time of no process: got %v, want an error naming /proc", err)
	}
}
