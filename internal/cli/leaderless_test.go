package cli

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/testenv"
)

// A worker started while its cluster has no quorum (two of three nodes
// down, so no stream, bucket or meta leader) does not exit: /readyz answers
// 503 naming what it waits for, and 200 once the nodes are back.
func TestWorkerWaitsForLeaderlessCluster(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "a three-node cluster")
	nodes := bustest.StartCluster(t, "w", 3)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// The streams exist, replicated on the three nodes, as after a first start.
	b, err := bus.Connect(ctx, bus.Config{URL: nodes[0].URL(), Replicas: 3, Name: t.Name()})
	if err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	b.Close()
	nodes[1].Stop()
	nodes[2].Stop()

	env := map[string]string{
		"RELAY_HTTP_ADDR":       freeAddr(t),
		"RELAY_DATA_DIR":        t.TempDir(),
		"NATS_URL":              nodes[0].URL(),
		"RELAY_STREAM_REPLICAS": "3",
		"GITHUB_TOKEN":          "ghp_leaderless000000000000000000000000000",
		"RELAY_LOG_FORMAT":      "json",
	}
	var logs syncBuffer
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	exited := make(chan int, 1)
	go func() { exited <- Run(rctx, []string{"outbound"}, config.FromMap(env), &syncBuffer{}, &logs) }()
	readyz := "http://" + env["RELAY_HTTP_ADDR"] + "/readyz"
	// readyzUntil polls /readyz until ok holds; the relay exiting meanwhile
	// fails the test.
	readyzUntil := func(within time.Duration, while string, ok func(code int, body string) (bool, string)) {
		t.Helper()
		testenv.Poll(t, within, func() (bool, string) {
			select {
			case code := <-exited:
				t.Fatalf("relay outbound exited (code %d) while %s:\n%s", code, while, logs.String())
			default:
			}
			return ok(get(readyz))
		})
	}
	readyzUntil(30*time.Second, "the cluster had no quorum", func(code int, body string) (bool, string) {
		return code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for"),
			"readyz: got " + http.StatusText(code) + " " + body + ", want 503 naming what it waits for"
	})

	nodes[1].Start()
	nodes[2].Start()
	readyzUntil(90*time.Second, "the cluster came back", func(code int, body string) (bool, string) {
		return code == http.StatusOK, "readyz: got " + http.StatusText(code) + " " + body + ", want 200"
	})
	stop()
	if code := testenv.Receive(t, exited, 30*time.Second, "relay outbound stopping"); code != 0 {
		t.Fatalf("relay outbound: exit code %d, want 0:\n%s", code, logs.String())
	}
}

// get returns the status and body of GET url (0 when it fails).
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
