package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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
// and webhooks 503 until the server is up, then it serves. The password in
// NATS_URL never reaches the log.
func TestServeWaitsForNATS(t *testing.T) {
	t.Parallel()
	natsAddr := freeAddr(t)
	host, portStr, _ := net.SplitHostPort(natsAddr)
	port, _ := strconv.Atoi(portStr)
	env := map[string]string{
		"RELAY_HTTP_ADDR":       freeAddr(t),
		"RELAY_DATA_DIR":        t.TempDir(),
		"RELAY_LOG_FORMAT":      "json",
		"NATS_URL":              "nats://relay:pa55w0rd-in-url@" + natsAddr,
		"GITHUB_WEBHOOK_SECRET": "s",
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, []string{"ingest"}, config.FromMap(env), &syncBuffer{}, &stderr) }()
	base := "http://" + env["RELAY_HTTP_ADDR"]
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", stderr.String())
		}
	})
	waitHTTP(t, base+"/healthz", http.StatusOK, 10*time.Second)
	if got := getStatus(base + "/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("readyz with NATS down: got %d, want 503", got)
	}
	resp, err := http.Post(base+"/webhooks/github", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("webhook with NATS down: got %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	select {
	case code := <-done:
		t.Fatalf("exited %d with NATS down, want it to wait; log:\n%s", code, stderr.String())
	default:
	}

	ns, err := server.NewServer(&server.Options{Host: host, Port: port, JetStream: true, StoreDir: t.TempDir(),
		NoSigs: true, NoLog: true, Username: "relay", Password: "pa55w0rd-in-url"})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	waitHTTP(t, base+"/readyz", http.StatusOK, 20*time.Second)
	// A webhook now reaches the gateway (401: the test does not sign it).
	resp, err = http.Post(base+"/webhooks/github", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned webhook with NATS up: got %d, want 401", resp.StatusCode)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	log := stderr.String()
	if !strings.Contains(log, "relay started") {
		t.Errorf("log lacks the start line:\n%s", log)
	}
	if strings.Contains(log, "pa55w0rd") {
		t.Errorf("the NATS password reached the log:\n%s", log)
	}
}

// RELAY_METRICS_ADDR moves health and metrics off the webhook listener;
// RELAY_NATS_TOKEN locks the embedded server, and operator commands use it.
func TestOpsListenerAndNATSToken(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	env["RELAY_METRICS_ADDR"] = freeAddr(t)
	env["RELAY_NATS_TOKEN"] = "t0ken-for-nats"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, nil, config.FromMap(env), &syncBuffer{}, &stderr) }()
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
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d, want 0; log:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "t0ken-for-nats") {
		t.Errorf("the NATS token reached the log:\n%s", stderr.String())
	}
}
