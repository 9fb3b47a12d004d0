package cli

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/bench/gatewaybench"
	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/internal/bench/servebench"
	"github.com/relaystation/relay/internal/testenv"
)

// TestBenchServeShort runs `relay bench serve`'s generator briefly against
// the built binary: the gateway alone, the whole relay, and the whole relay
// with the agent. Every webhook is accepted, every consumer catches up, the
// inbound stream stores each webhook, the memory worker is sent each inbound
// envelope, the hooks worker (no hooks)
// none, and with the agent each webhook's suggestion reaches Slack. It
// asserts no speed.
func TestBenchServeShort(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "the serve benchmark's child processes")
	const rate, d = 40, time.Second
	targets := []servebench.Target{servebench.Targets[0], servebench.Targets[1], servebench.AgentTargets[0]}
	rep, err := servebench.Run(t.Context(), servebench.Config{Binary: relayBinary(t), Rate: rate, Duration: d, Runs: 1,
		DrainTimeout: time.Minute, Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(targets) {
		t.Fatalf("got %d results, want %d", len(rep.Results), len(targets))
	}
	for _, r := range rep.Results {
		if r.Accept.Requests != rate || r.Accept.Errors != 0 {
			t.Errorf("%s: got %d accepted and %d errors, want %d and none", r.Target.Name, r.Accept.Requests, r.Accept.Errors, rate)
		}
		if r.CPU <= 0 {
			t.Errorf("%s: got CPU %s, want some", r.Target.Name, r.CPU)
		}
		if got := r.Stored["RELAY_IN"]; got < rate {
			t.Errorf("%s: the inbound stream stored %d messages, want at least %d", r.Target.Name, got, rate)
		}
		if r.Target.Service != "serve" {
			continue
		}
		if got := r.Delivered["memory-in"]; got < rate {
			t.Errorf("%s: memory-in was sent %d envelopes, want at least %d", r.Target.Name, got, rate)
		}
		if got, ok := r.Delivered["hooks"]; !ok || got != 0 {
			t.Errorf("%s: hooks consumer (no hooks) sent %d (exists %v), want 0", r.Target.Name, got, ok)
		}
	}
	if agent := rep.Results[2]; agent.Suggestions != rate || len(agent.Loop) != rate {
		t.Errorf("with the agent: got %d suggestions and %d latencies, want %d each", agent.Suggestions, len(agent.Loop), rate)
	}
}

// TestBenchGatewayShort runs `relay bench gateway`'s generator briefly
// against the built binary's gateway and the external NATS server of
// NATS_URL: the gateway passes the signature check, every webhook under load
// is answered 200 and stored, its own process's CPU is counted, and the
// run's streams are gone afterwards. It asserts no speed.
func TestBenchGatewayShort(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "the gateway benchmark's child processes")
	js := bustest.External(t).JetStream() // skips without NATS_URL, fails in CI
	url := os.Getenv("NATS_URL")
	rep, err := gatewaybench.Run(t.Context(), gatewaybench.Config{Relay: relayBinary(t), Runs: 2,
		Config: ingestbench.Config{NATSURL: url, Concurrency: 4, Duration: 300 * time.Millisecond, Rate: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("got %d results, want 2 (the gateway, twice)", len(rep.Results))
	}
	for i, r := range rep.Results {
		if p := r.Saturation; p.Requests == 0 || p.Errors != 0 || p.CPU <= 0 {
			t.Errorf("run %d at saturation: got %d webhooks, %d errors, CPU %s; want some, none, some", i+1, p.Requests, p.Errors, p.CPU)
		}
		if p := r.FixedRate; p.Requests != 30 || p.Errors != 0 {
			t.Errorf("run %d at 100/s: got %d webhooks, %d errors; want 30, none", i+1, p.Requests, p.Errors)
		}
		if r.Stored != r.Accepted {
			t.Errorf("run %d: stored %d of %d accepted", i+1, r.Stored, r.Accepted)
		}
	}
	for _, name := range []string{"_IN", "_WORK", "_DLQ", "_BENTHOS"} {
		name = strings.ToUpper(rep.Prefix) + name
		if _, err := js.Stream(t.Context(), name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s after the run: got %v, want %v", name, err, jetstream.ErrStreamNotFound)
		}
	}
}
