package memory_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/memory/memtest"
	"github.com/relaystation/relay/memory/session"
	svc "github.com/relaystation/relay/services/memory"
)

// TestHotThread sends one thread's envelopes to every consumer of the worker
// at once (inbound, tool calls and results, agent steps): every turn lands
// once, and the worker's own handlers never conflict on the session.
func TestHotThread(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	kv, lt := memtest.Stores(t, b, session.KVConfig{Options: session.Options{MaxTurns: 1000}}, dims)
	// FoldAt high enough that every turn stays, so the test can count them.
	_, s := newWorker(t, b, memory.Config{Sessions: kv, LongTerm: lt, FoldAt: 1 << 20}, svc.Config{Concurrency: 8, DisableRPC: true})
	th := envelope.GitHubThread("acme", "api", 42)
	subjects := []string{"in.github.issue_comment", envelope.SubjectToolCall, envelope.SubjectToolResult, "agent.answer"}
	const n = 200
	for i := range n {
		publish(t, b, subjects[i%len(subjects)], newEnv(th, envelope.RoleUser, fmt.Sprintf("turn %03d", i)))
	}
	testenv.Go(t, "Run", s.Run)
	waitTurns(t, kv, th, n)
	got, err := kv.Load(t.Context(), th)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tu := range got.Turns {
		if seen[tu.Content] {
			t.Fatalf("turn %q stored twice", tu.Content)
		}
		seen[tu.Content] = true
	}
	if st := kv.Stats(); st.Conflicts != 0 {
		t.Fatalf("got %d revision conflicts between the worker's handlers, want 0 (stats %+v)", st.Conflicts, st)
	}
	testenv.Poll(t, 10*time.Second, func() (bool, string) {
		for _, name := range []string{"memory-in", "memory-tool", "memory-agent"} {
			c, err := consumerInfo(t, b, name)
			if err != nil {
				return false, err.Error()
			}
			if c.NumRedelivered != 0 {
				t.Fatalf("consumer %s redelivered %d messages, want 0", name, c.NumRedelivered)
			}
		}
		return true, ""
	})
}
