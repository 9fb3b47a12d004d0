package cli

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/config"
)

// getStatus answers a GET's status code (0 when the request failed).
func getStatus(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// A worker started while NATS is down waits for it: liveness 200, readiness
// and webhooks 503 until the server is up, then it serves; NATS restarted
// under load loses no acknowledged webhook, and the gateway comes back. The
// password in NATS_URL never reaches the log.
func TestServeWaitsForNATS(t *testing.T) {
	t.Parallel()
	ns := bustest.NewRestartable(t, server.Options{Username: "relay", Password: "pa55w0rd-in-url"})
	w := startIngestWithoutNATS(t, ns.Addr())
	w.checkWaiting(t)

	ns.Start()
	waitHTTP(t, w.base+"/readyz", http.StatusOK, 20*time.Second)

	ok := w.webhooksAroundRestart(t, ns)
	stored := storedIDs(t, "nats://relay:pa55w0rd-in-url@"+ns.Addr())
	for _, id := range ok {
		if !stored[id] {
			t.Errorf("webhook %s was answered 200 but is not stored", id)
		}
	}
	t.Logf("%d webhooks answered 200 around a NATS restart, %d stored", len(ok), len(stored))
	// A webhook now reaches the gateway (401: the test does not sign it).
	resp, err := http.Post(w.base+"/webhooks/github", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned webhook with NATS up: got %d, want 401", resp.StatusCode)
	}
	w.cancel()
	if code := <-w.done; code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	log := w.stderr.String()
	if !strings.Contains(log, "relay started") {
		t.Errorf("log lacks the start line:\n%s", log)
	}
	if strings.Contains(log, "pa55w0rd") {
		t.Errorf("the NATS password reached the log:\n%s", log)
	}
}

// waitingIngest is an ingest worker started against a NATS server that is
// not there yet.
type waitingIngest struct {
	base   string      // the worker's HTTP base URL
	stderr *syncBuffer // its log
	done   chan int    // its exit code
	cancel context.CancelFunc
}

// startIngestWithoutNATS starts the ingest command with NATS_URL (and a
// password in it) pointing at natsAddr, where nothing listens yet, and waits
// for its liveness endpoint.
func startIngestWithoutNATS(t *testing.T, natsAddr string) *waitingIngest {
	t.Helper()
	env := map[string]string{
		"RELAY_HTTP_ADDR":       freeAddr(t),
		"RELAY_DATA_DIR":        t.TempDir(),
		"RELAY_LOG_FORMAT":      "json",
		"NATS_URL":              "nats://relay:pa55w0rd-in-url@" + natsAddr,
		"GITHUB_WEBHOOK_SECRET": "s",
		// While NATS is down a webhook waits this long before its 503.
		"RELAY_INGEST_DEADLINE_GITHUB": "1s",
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	w := &waitingIngest{base: "http://" + env["RELAY_HTTP_ADDR"], stderr: &syncBuffer{}, done: make(chan int, 1), cancel: cancel}
	go func() { w.done <- Run(ctx, []string{"ingest"}, config.FromMap(env), &syncBuffer{}, w.stderr) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", w.stderr.String())
		}
	})
	waitHTTP(t, w.base+"/healthz", http.StatusOK, 10*time.Second)
	return w
}

// checkWaiting checks that, with NATS down, readiness and webhooks answer 503
// (webhooks with a Retry-After) and the worker has not exited.
func (w *waitingIngest) checkWaiting(t *testing.T) {
	t.Helper()
	if got := getStatus(w.base + "/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("readyz with NATS down: got %d, want 503", got)
	}
	resp, err := http.Post(w.base+"/webhooks/github", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("webhook with NATS down: got %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	select {
	case code := <-w.done:
		t.Fatalf("exited %d with NATS down, want it to wait; log:\n%s", code, w.stderr.String())
	default:
	}
}

// webhooksAroundRestart restarts NATS under load: webhooks keep coming
// before, during and after the restart, and the gateway answers 200 again
// after it. It returns the ids of the webhooks answered 200.
func (w *waitingIngest) webhooksAroundRestart(t *testing.T, ns *bustest.Restartable) []string {
	t.Helper()
	var ok []string
	send := func(i int) int {
		id := "restart-" + strconv.Itoa(i)
		code := w.signedPing(t, id)
		if code == http.StatusOK {
			ok = append(ok, "github:42:"+id)
		} else if code != http.StatusServiceUnavailable {
			t.Errorf("webhook %d: got %d, want 200, or 503 while NATS restarts", i, code)
		}
		return code
	}
	i := 0
	for ; i < 50; i++ {
		send(i)
	}
	ns.Stop()
	for ; i < 53; i++ {
		send(i) // 503 while NATS is down
	}
	ns.Start()
	deadline := time.Now().Add(20 * time.Second)
	for ; send(i) != http.StatusOK; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no webhook answered 200 within 20s of NATS coming back")
		}
		time.Sleep(20 * time.Millisecond) // pace the retries, as a provider does
	}
	for i++; i < 120; i++ {
		send(i)
	}
	return ok
}

// signedPing posts a signed GitHub ping with delivery id and answers the
// status code.
func (w *waitingIngest) signedPing(t *testing.T, id string) int {
	t.Helper()
	req := githubWebhook(t.Context(), w.base, "s", "ping", id, []byte(`{"zen":"z","hook_id":42}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("webhook %s: %v", id, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// RELAY_METRICS_ADDR moves health and metrics off the webhook listener;
// RELAY_NATS_TOKEN locks the embedded server, and operator commands use it.
func TestOpsListenerAndNATSToken(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	env["RELAY_METRICS_ADDR"] = freeAddr(t)
	env["RELAY_NATS_TOKEN"] = "t0ken-for-nats"
	var stderr syncBuffer
	stop := serveRelay(t, env, &stderr)
	ops := "http://" + env["RELAY_METRICS_ADDR"]
	waitHTTP(t, ops+"/readyz", http.StatusOK, 10*time.Second)
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if got := getStatus(ops + p); got != http.StatusOK {
			t.Errorf("ops %s: got %d, want 200", p, got)
		}
		if got := getStatus("http://" + env["RELAY_HTTP_ADDR"] + p); got != http.StatusNotFound {
			t.Errorf("public %s: got %d, want 404", p, got)
		}
	}
	// The healthcheck command follows the ops listener.
	var out, errb syncBuffer
	if code := Run(t.Context(), []string{"healthcheck"}, config.FromMap(env), &out, &errb); code != 0 {
		t.Errorf("healthcheck: exit %d: %s", code, errb.String())
	}

	if nc, err := nats.Connect("nats://" + env["RELAY_NATS_LISTEN"]); err == nil {
		nc.Close()
		t.Fatal("a client without the token reached the embedded NATS server")
	}
	out, errb = syncBuffer{}, syncBuffer{}
	if code := Run(t.Context(), []string{"dlq", "list"}, config.FromMap(env), &out, &errb); code != 0 {
		t.Errorf("dlq list with the token: exit %d: %s", code, errb.String())
	}
	noToken := map[string]string{}
	for k, v := range env {
		if k != "RELAY_NATS_TOKEN" {
			noToken[k] = v
		}
	}
	out, errb = syncBuffer{}, syncBuffer{}
	if code := Run(t.Context(), []string{"dlq", "list"}, config.FromMap(noToken), &out, &errb); code == 0 {
		t.Error("dlq list without the token: got exit 0, want a refusal")
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d, want 0; log:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "t0ken-for-nats") {
		t.Errorf("the NATS token reached the log:\n%s", stderr.String())
	}
}

// storedIDs reads every message of the default inbound stream and returns
// their Nats-Msg-Id headers.
func storedIDs(t *testing.T, url string) map[string]bool {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := js.OrderedConsumer(t.Context(), "RELAY_IN", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for n := info.NumPending; n > 0; {
		batch, err := c.Fetch(int(min(n, 100)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			out[m.Headers().Get(jetstream.MsgIDHeader)] = true
			got++
		}
		if got == 0 {
			t.Fatalf("inbound stream: %d messages unread", n)
		}
		n -= uint64(got)
	}
	return out
}
