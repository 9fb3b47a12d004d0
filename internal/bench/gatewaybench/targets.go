package gatewaybench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/internal/bench/servebench"
	"github.com/relaystation/relay/mappers/github"
)

// env is what the targets of a run share.
type env struct {
	cfg    Config
	dir    string   // temporary files of the run
	bus    *bus.Bus // the parent's connection, under the run's prefix
	secret string   // the webhook secret of both targets
}

// childEnv is the environment every child starts with, plus kv.
func (e *env) childEnv(home string, kv ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + os.TempDir()}, kv...)
}

// gateway returns the start of relay binary bin's gateway, its files named
// after label.
func (e *env) gateway(bin, label string) func(context.Context, int) (*server, error) {
	return func(ctx context.Context, n int) (*server, error) { return e.startGateway(ctx, bin, label, n) }
}

// startGateway runs `bin bench proc -prefix <run's> ingest` against the
// external server (with a CPU profile when asked).
func (e *env) startGateway(ctx context.Context, bin, label string, n int) (*server, error) {
	addr, err := servebench.FreeAddr()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(e.dir, fmt.Sprintf("%s-%d", label, n+1))
	args := []string{"bench", "proc", "-prefix", e.bus.Prefix()}
	if e.cfg.ProfileDir != "" {
		args = append(args, "-cpuprofile", filepath.Join(e.cfg.ProfileDir, fmt.Sprintf("%s-%d.pprof", label, n+1)))
	}
	cmd := exec.Command(bin, append(args, "ingest")...)
	cmd.Env = e.childEnv(data, "NATS_URL="+e.cfg.NATSURL, "RELAY_HTTP_ADDR="+addr, "RELAY_DATA_DIR="+data,
		"RELAY_LOG_LEVEL=warn", "GITHUB_WEBHOOK_SECRET="+e.secret)
	p, err := servebench.Start(ctx, cmd, "http://"+addr+"/readyz")
	if err != nil {
		return nil, err
	}
	js := e.bus.JetStream()
	name, err := js.StreamNameBySubject(ctx, e.bus.Subject("in.github.issues"))
	if err == nil {
		var st jetstream.Stream
		if st, err = js.Stream(ctx, name); err == nil {
			return &server{url: "http://" + addr + "/webhooks/github", proc: p, stream: st}, nil
		}
	}
	_ = p.Stop()
	return nil, fmt.Errorf("the gateway's inbound stream: %w", err)
}

// benthosStream is the stream Benthos publishes to: the run's prefix and
// BENTHOS, subjects <prefix>.benthos.>.
func benthosStream(b *bus.Bus) string { return strings.ToUpper(b.Prefix()) + "_BENTHOS" }

// startBenthos creates Benthos's stream (as the relay's inbound stream: file
// storage, a 15-minute duplicate window) and runs Benthos with
// benthosConfig.
func (e *env) startBenthos(ctx context.Context, n int) (*server, error) {
	st, err := e.bus.JetStream().CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: benthosStream(e.bus), Subjects: []string{e.bus.Subject("benthos.>")},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Discard: jetstream.DiscardOld,
		Duplicates: 15 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", benthosStream(e.bus), err)
	}
	conf := filepath.Join(e.dir, "benthos.yaml")
	if err := os.WriteFile(conf, []byte(benthosConfig), 0o600); err != nil {
		return nil, err
	}
	addr, err := servebench.FreeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := servebench.FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.cfg.Benthos, "-c", conf)
	cmd.Env = e.childEnv(filepath.Join(e.dir, fmt.Sprintf("benthos-%d", n+1)),
		"BENCH_HTTP_ADDR="+addr, "BENCH_ADMIN_ADDR="+admin, "BENCH_NATS_URL="+e.cfg.NATSURL,
		"BENCH_SUBJECT="+e.bus.Subject("benthos.github"), fmt.Sprint("BENCH_MAX_IN_FLIGHT=", e.cfg.Concurrency),
		"WEBHOOK_SECRET="+e.secret)
	p, err := servebench.Start(ctx, cmd, "http://"+admin+"/ready")
	if err != nil {
		return nil, err
	}
	return &server{url: "http://" + addr + "/webhooks/github", proc: p, stream: st}, nil
}

// benthosConfig does the gateway's job in Benthos v4: the http_server input
// on loopback answers a request only once its message was acknowledged by
// the output (200) or refused (502): it waits on the transaction's result
// before it writes the response. The mapping checks X-Hub-Signature-256 =
// "sha256=" + hex(HMAC-SHA256(secret, body)) and fails the message on a
// mismatch or a missing header, leaving body and metadata as they came (a
// mutation does not do: there content() of a JSON body is not the bytes
// received, and every valid signature failed); the switch output rejects a failed message
// (non-2xx) and publishes the others to JetStream, the delivery id as
// Nats-Msg-Id, with as many publishes in flight as the gateway has concurrent
// requests. ${NAME} are environment variables, ${! ... } Bloblang.
const benthosConfig = `http:
  address: ${BENCH_ADMIN_ADDR}
logger:
  level: ERROR
input:
  http_server:
    address: ${BENCH_HTTP_ADDR}
    path: /webhooks/github
    allowed_verbs: [POST]
    timeout: 10s
pipeline:
  processors:
    - mapping: |
        root = if metadata("X-Hub-Signature-256") != "sha256=" + content().hash("hmac_sha256", "${WEBHOOK_SECRET}").encode("hex") { throw("signature mismatch") }
output:
  switch:
    cases:
      - check: errored()
        output:
          reject: "${! error() }"
      - output:
          nats_jetstream:
            urls: [ "${BENCH_NATS_URL}" ]
            subject: ${BENCH_SUBJECT}
            headers:
              Nats-Msg-Id: ${! metadata("X-Github-Delivery") }
            max_in_flight: ${BENCH_MAX_IN_FLIGHT}
`

// checkSignatures posts the payload with a wrong signature and without one,
// wanting neither answered 2xx, then signed with key, wanting 200.
func checkSignatures(ctx context.Context, client *http.Client, url string, key []byte) error {
	for _, c := range []struct {
		name, sig string
		ok        bool
	}{
		{"a wrong signature", github.Sign(append([]byte("not-"), key...), ingestbench.Payload()), false},
		{"no signature", "", false},
		{"a valid signature", github.Sign(key, ingestbench.Payload()), true},
	} {
		status, err := ingestbench.Send(ctx, client, url, c.sig)
		if err != nil {
			return fmt.Errorf("check with %s: %w", c.name, err)
		}
		if accepted := status >= 200 && status < 300; accepted != c.ok || c.ok && status != http.StatusOK {
			return fmt.Errorf("check with %s: answered %d, want %s", c.name, status, map[bool]string{true: "200", false: "a refusal (not 2xx)"}[c.ok])
		}
	}
	return nil
}
