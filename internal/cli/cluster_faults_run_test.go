package cli

import (
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

// TestClusterFaults runs the split deployment, every worker its own process,
// on a three-node JetStream cluster of nats-server processes (the version
// go.mod requires, built by the test) with RELAY_STREAM_REPLICAS=3, sends
// issues.opened webhooks as GitHub does (once: GitHub does not retry a
// failed delivery), approves each suggestion as Slack does (a click retried
// three times), and SIGKILLs NATS nodes, each restarted on its store 5 s
// later: the short form kills one of each kind (any node, the meta leader,
// the inbound stream's leader, the agent task bucket's leader) while the
// webhooks arrive. It counts non-2xx answers, lost and duplicated comments,
// worker processes that exited on their own, and the p50/p99 from webhook
// to comment; all but the times must be 0. The long form
// (-args -cluster.long) kills a node every 15 s and a random worker every
// 2 s over 200 webhooks, and requires p99 under 15 s.
func TestClusterFaults(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "a NATS cluster of processes and worker processes")
	p := clusterParams{issues: 24, spread: 40 * time.Second, nodeEvery: 9 * time.Second, down: 5 * time.Second,
		kinds: []string{"node", "meta leader", "inbound stream leader", "bucket leader"}, settle: 60 * time.Second}
	if *clusterLong {
		p = clusterParams{issues: 200, spread: 180 * time.Second, nodeEvery: 15 * time.Second, down: 5 * time.Second,
			workerEvery: 2 * time.Second, settle: 120 * time.Second}
	}
	c := startNATSCluster(t, 3)
	d := newClusterDeployment(t, c, p)
	r := d.run(t, p)
	t.Logf("cluster faults: %d webhooks, non-2xx %d, lost %d, duplicated %d, process exits %d, node kills %v, worker kills %d, "+
		"dead letters %d; webhook->comment p50 %s, p99 %s, max %s",
		p.issues, r.non2xx, r.lost, r.duplicated, r.exits, r.nodeKills, r.workerKills, r.deadLetters,
		r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.max.Round(time.Millisecond))
	if r.non2xx != 0 || r.lost != 0 || r.duplicated != 0 || r.exits != 0 {
		t.Errorf("non-2xx %d, lost %d, duplicated %d, process exits %d; want all 0", r.non2xx, r.lost, r.duplicated, r.exits)
	}
	if *clusterLong && r.p99 > 15*time.Second {
		t.Errorf("webhook->comment p99 %s, want under 15s", r.p99)
	}
}
