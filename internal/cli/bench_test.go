package cli

import (
	"testing"
	"time"

	"github.com/relaystation/relay/internal/servebench"
	"github.com/relaystation/relay/internal/testenv"
)

// TestBenchServeShort runs `relay bench serve`'s generator briefly against
// the built binary: the gateway alone, the whole relay, and the whole relay
// with the agent. Every webhook is accepted, every consumer catches up, the
// memory worker is sent each inbound envelope, the hooks worker (no hooks)
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
