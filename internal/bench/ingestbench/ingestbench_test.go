package ingestbench_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/internal/testenv"
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

// TestRunExternal runs the phases against the external NATS server of
// NATS_URL: every request succeeds, the phases account CPU, and the run's
// streams are gone afterwards.
func TestRunExternal(t *testing.T) {
	t.Parallel()
	url := os.Getenv("NATS_URL")
	if url == "" {
		testenv.Missing(t, "NATS_URL is not set; start nats-server -js and set NATS_URL=nats://127.0.0.1:4222")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		testenv.Missing(t, "NATS at %s: %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ingestbench.Run(t.Context(), ingestbench.Config{Concurrency: 4, Duration: 300 * time.Millisecond, Rate: 200, MaxRequests: 1000, NATSURL: url})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if p := rep.Saturation; p.Requests == 0 || p.Errors != 0 || p.CPU <= 0 {
		t.Errorf("saturation: got %d requests, %d errors, CPU %s; want some, none, some", p.Requests, p.Errors, p.CPU)
	}
	var out strings.Builder
	rep.Write(&out)
	if !strings.Contains(out.String(), "JetStream at nats://") || !strings.Contains(out.String(), "CPU/1,000 req") {
		t.Errorf("report lacks the server or the CPU column:\n%s", out.String())
	}
	streams := js.StreamNames(t.Context())
	for name := range streams.Name() {
		if strings.HasPrefix(name, strings.ToUpper(rep.Prefix)+"_") {
			t.Errorf("stream %s of the run left behind", name)
		}
	}
	if err := streams.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
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
