package cli

import (
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
)

// TestSendThenTraceFromTheSameFolder is the first webhook as a newcomer
// sends it: `relay serve` with the default NATS address taken (the
// machine's own NATS on 4222), then, with nothing but the data dir and the
// secrets in common, `relay send github` posts a signed example and
// `relay trace <delivery>` finds its story on the relay's own bus.
func TestSendThenTraceFromTheSameFolder(t *testing.T) {
	t.Parallel()
	// The default embedded address is taken: by the machine's NATS, or here.
	if ln, err := net.Listen("tcp", "127.0.0.1:4222"); err == nil {
		t.Cleanup(func() { ln.Close() })
	}
	dataDir := t.TempDir()
	secrets := map[string]string{
		"RELAY_DATA_DIR":             dataDir,
		"GITHUB_WEBHOOK_SECRET":      "gh-send-secret-0123456789",
		"SLACK_SIGNING_SECRET":       "slack-send-secret-0123456789",
		"SENTRY_CLIENT_SECRET":       "sentry-send-secret-0123456789",
		"OPENPROJECT_WEBHOOK_SECRET": "op-send-secret-0123456789",
	}
	env := maps.Clone(secrets)
	env["RELAY_HTTP_ADDR"] = freeAddr(t)
	env["RELAY_CONSOLE_ADDR"] = freeAddr(t)
	env["RELAY_LOG_FORMAT"] = "json"
	var log syncBuffer
	stop := serveReady(t, env, &log, 20*time.Second)
	rec, err := readRunning(dataDir)
	if err != nil {
		t.Fatalf("no record of the running relay: %v", err)
	}
	if strings.HasSuffix(rec.NATS, ":4222") || rec.HTTP != "http://"+env["RELAY_HTTP_ADDR"] || rec.Console != "http://"+env["RELAY_CONSOLE_ADDR"] {
		t.Errorf("record %+v: want a free NATS port (4222 is taken), http://%s and console http://%s", rec, env["RELAY_HTTP_ADDR"], env["RELAY_CONSOLE_ADDR"])
	}

	run := cliRunner(t, secrets)
	code, out, stderr := run("send", "github")
	if code != 0 {
		t.Fatalf("send github: exit %d\n%s%s\nrelay log:\n%s", code, out, stderr, log.String())
	}
	m := regexp.MustCompile(`delivery ([0-9a-f-]{36}) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("send github printed no delivery id:\n%s", out)
	}
	delivery := m[1]
	for _, want := range []string{"answer: 200 OK", "follow it: relay trace " + delivery, rec.Console + "/story?id=" + delivery, "thread: github:"} {
		if !strings.Contains(out, want) {
			t.Errorf("send github: output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr, "sending to "+rec.HTTP+"/webhooks/github: the relay started from this folder") {
		t.Errorf("send github: stderr does not say where it sends and why: %q", stderr)
	}
	testenv.Poll(t, 10*time.Second, func() (bool, string) {
		code, out, stderr = run("trace", delivery)
		return code == 0 && strings.Contains(out, "webhook"), "trace: " + out + stderr
	})
	if !strings.Contains(stderr, "using the bus at "+rec.NATS+": the relay started from this folder") {
		t.Errorf("trace: stderr does not name the relay's bus and why: %q", stderr)
	}
	testenv.Poll(t, 5*time.Second, func() (bool, string) {
		return strings.Contains(log.String(), `"msg":"webhook accepted"`) && strings.Contains(log.String(), `"delivery":"`+delivery+`"`),
			"no accepted line for the delivery in the relay's log"
	})

	for _, p := range []string{"slack", "sentry", "openproject"} {
		if code, out, stderr := run("send", p); code != 0 || !strings.Contains(out, "answer: 200 OK") || !strings.Contains(out, "follow it: relay trace ") {
			t.Errorf("send %s: exit %d, want 0 with 200 and a trace line\n%s%s", p, code, out, stderr)
		}
	}
	if code, out, _ := run("send", "github", "--event", "issue_comment"); code != 0 || !strings.Contains(out, "github issue_comment delivery") {
		t.Errorf("send github --event issue_comment: exit %d\n%s", code, out)
	}
	file := writeTemp(t, "ping.json", `{"zen":"Design for failure.","hook_id":1}`)
	if code, out, _ := run("send", "github", "--event", "ping", "--file", file, "--to", rec.HTTP); code != 0 || !strings.Contains(out, "answer: 200 OK") {
		t.Errorf("send github --file --to: exit %d\n%s", code, out)
	}

	// A secret other than the relay's is refused, and said so.
	wrong := maps.Clone(secrets)
	wrong["GITHUB_WEBHOOK_SECRET"] = "not-the-relays-secret-000"
	if code, out, _ := cliRunner(t, wrong)("send", "github"); code != 1 || !strings.Contains(out, "401") || !strings.Contains(out, "GITHUB_WEBHOOK_SECRET") {
		t.Errorf("send with the wrong secret: exit %d, want 1 naming 401 and GITHUB_WEBHOOK_SECRET\n%s", code, out)
	}
	noSecret := maps.Clone(secrets)
	delete(noSecret, "SENTRY_CLIENT_SECRET")
	if code, _, stderr := cliRunner(t, noSecret)("send", "sentry"); code != 1 || !strings.Contains(stderr, "SENTRY_CLIENT_SECRET is not set") {
		t.Errorf("send sentry without its secret: exit %d, want 1 naming SENTRY_CLIENT_SECRET: %q", code, stderr)
	}
	if code, _, stderr := run("send", "github", "--event", "nope"); code != 1 || !strings.Contains(stderr, "examples: ") {
		t.Errorf("send github --event nope: exit %d, want 1 listing the examples: %q", code, stderr)
	}

	// Stopped, the relay removes its record; the commands say so.
	if code := stop(); code != 0 {
		t.Fatalf("relay exit %d", code)
	}
	if _, err := os.Stat(runningPath(dataDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("record still there after the relay stopped: %v", err)
	}
}

// A record whose process is gone is not used, and the command says why.
func TestStaleRecordIsNotUsed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, _ := json.Marshal(running{PID: 1 << 30, NATS: "nats://127.0.0.1:1", Started: time.Now()})
	testenv.WriteFile(t, runningPath(dir), string(b))
	a := &app{env: nil}
	a.base.DataDir, a.base.NATSListen = dir, "127.0.0.1:4222"
	url, why := a.busURL()
	if url != "nats://127.0.0.1:4222" || !strings.Contains(why, "no longer runs") {
		t.Errorf("stale record: got %s (%s), want nats://127.0.0.1:4222 saying the recorded relay no longer runs", url, why)
	}
	a.base.NATSURL = "nats://elsewhere:4222"
	if url, why := a.busURL(); url != a.base.NATSURL || why != "NATS_URL" {
		t.Errorf("with NATS_URL: got %s (%s), want NATS_URL first", url, why)
	}
}
