package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
)

// syncBuffer is testenv.Buffer, under the name this package's tests know.
type syncBuffer = testenv.Buffer

// cliRunner returns a function that runs one relay command with env and
// gives back its exit code, stdout and stderr.
func cliRunner(t *testing.T, env map[string]string) func(args ...string) (int, string, string) {
	return func(args ...string) (int, string, string) {
		var out, errb syncBuffer
		code := Run(t.Context(), args, config.FromMap(env), &out, &errb)
		return code, out.String(), errb.String()
	}
}

// serveRelay runs `relay serve` with env, its log written to stderr (nil:
// dropped), until stop or the end of the test. stop cancels it and returns
// its exit code; it may be called more than once.
func serveRelay(t testing.TB, env map[string]string, stderr io.Writer) (stop func() int) {
	return runRelay(t, env, nil, stderr)
}

// runRelay is serveRelay for the command args (a single service, say). Its
// stop fails the test when the relay does not return within 30 s of the
// cancel, and then gives -1.
func runRelay(t testing.TB, env map[string]string, args []string, stderr io.Writer) (stop func() int) {
	if stderr == nil {
		stderr = &syncBuffer{}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, config.FromMap(env), &syncBuffer{}, stderr) }()
	stop = sync.OnceValue(func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Errorf("relay %v did not stop within 30s of the cancel", args)
			return -1
		}
	})
	t.Cleanup(func() { stop() })
	return stop
}

// serveReady is serveRelay, once its /readyz answers 200 (within d).
func serveReady(t *testing.T, env map[string]string, stderr io.Writer, d time.Duration) (stop func() int) {
	t.Helper()
	stop = serveRelay(t, env, stderr)
	waitHTTP(t, "http://"+env["RELAY_HTTP_ADDR"]+"/readyz", http.StatusOK, d)
	return stop
}

// writeTemp writes content to the file name in a new temporary directory
// and returns its path.
func writeTemp(t testing.TB, name, content string) string {
	t.Helper()
	return testenv.WriteFile(t, filepath.Join(t.TempDir(), name), content)
}

// freeAddr is testenv.FreeAddr, under the name this package's tests know.
func freeAddr(t testing.TB) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

func waitHTTP(t testing.TB, url string, want int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: got %v (err %v) after %s, want %d", url, resp, err, d, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// embeddedEnv are the settings of a relay with embedded defaults on free ports.
func embeddedEnv(t testing.TB) map[string]string {
	return map[string]string{
		"RELAY_HTTP_ADDR":    freeAddr(t),
		"RELAY_CONSOLE_ADDR": freeAddr(t),
		"RELAY_NATS_LISTEN":  freeAddr(t),
		"RELAY_DATA_DIR":     t.TempDir(),
		"RELAY_LOG_FORMAT":   "json",
	}
}

func TestServeEmbeddedReadyAndGracefulStop(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	var stderr syncBuffer
	start := time.Now()
	stop := serveRelay(t, env, &stderr)
	waitHTTP(t, "http://"+env["RELAY_HTTP_ADDR"]+"/readyz", http.StatusOK, 5*time.Second)
	t.Logf("ready after %s", time.Since(start))
	waitHTTP(t, "http://"+env["RELAY_HTTP_ADDR"]+"/healthz", http.StatusOK, time.Second)
	resp, err := http.Get("http://" + env["RELAY_HTTP_ADDR"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(body.String(), "go_goroutines") {
		t.Errorf("metrics lack Go collectors:\n%.500s", body.String())
	}
	// Other processes can attach to the embedded server.
	peer, err := bus.Connect(t.Context(), bus.Config{URL: "nats://" + env["RELAY_NATS_LISTEN"]})
	if err != nil {
		t.Fatalf("second process cannot reach the embedded NATS: %v", err)
	}
	if _, err := peer.Publish(t.Context(), "in.github.issues", envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "x")); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	if code := stop(); code != 0 {
		t.Fatalf("exit %d after cancel, want 0; log:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "relay stopped") {
		t.Errorf("log lacks the stop line:\n%s", stderr.String())
	}
}

func TestInvalidSettingsStopStartup(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env  map[string]string
		want []string
	}{
		"bad level":       {map[string]string{"RELAY_LOG_LEVEL": "loud"}, []string{"RELAY_LOG_LEVEL"}},
		"unknown setting": {map[string]string{"RELAY_HTTP_ADR": ":1"}, []string{"RELAY_HTTP_ADR", "unknown setting"}},
		"bad nats url":    {map[string]string{"NATS_URL": "http://x"}, []string{"NATS_URL"}},
		"bad http addr":   {map[string]string{"RELAY_HTTP_ADDR": "nope"}, []string{"RELAY_HTTP_ADDR"}},
		"several at once": {map[string]string{"RELAY_LOG_FORMAT": "xml", "RELAY_NATS_LISTEN": "x"}, []string{"RELAY_LOG_FORMAT", "RELAY_NATS_LISTEN"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stderr syncBuffer
			code := Run(t.Context(), nil, config.FromMap(tc.env), &syncBuffer{}, &stderr)
			if code == 0 {
				t.Fatal("got exit 0, want failure")
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not name %q", stderr.String(), w)
				}
			}
		})
	}
}

func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	env["RELAY_LOG_LEVEL"] = "debug"
	for _, k := range []string{"GITHUB_WEBHOOK_SECRET", "SLACK_SIGNING_SECRET", "GITHUB_TOKEN", "SLACK_BOT_TOKEN", "LLM_API_KEY"} {
		env[k] = "s3cr3t-" + strings.ToLower(k)
	}
	var stderr syncBuffer
	serveReady(t, env, &stderr, 10*time.Second)()
	if strings.Contains(stderr.String(), "s3cr3t") {
		t.Fatalf("a secret reached the log:\n%s", stderr.String())
	}
}

func TestDLQCommands(t *testing.T) {
	t.Parallel()
	env := embeddedEnv(t)
	stop := serveReady(t, env, nil, 10*time.Second)

	// A worker in another process dead-letters a message.
	peer, err := bus.Connect(t.Context(), bus.Config{URL: "nats://" + env["RELAY_NATS_LISTEN"]})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "poison")
	if _, err := peer.Publish(t.Context(), "in.github.issues", e); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(t.Context())
	consumed := make(chan struct{})
	go func() {
		_ = peer.Consume(cctx, bus.ConsumerConfig{Name: "agent", Subject: "in.>"}, bus.HandlerFunc(func(context.Context, *bus.Message) error {
			return bus.Permanent(os.ErrInvalid)
		}))
		close(consumed)
	}()
	cli := cliRunner(t, env)
	deadline := time.Now().Add(10 * time.Second)
	var out string
	for {
		var code int
		code, out, _ = cli("dlq", "list")
		if code == 0 && strings.Contains(out, e.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dlq list never showed %s:\n%s", e.ID, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(out, "agent") || !strings.Contains(out, "in.github.issues") || !strings.Contains(out, "1 dead letter") {
		t.Errorf("dlq list output lacks consumer, subject or count:\n%s", out)
	}
	listJSON := func() []map[string]any {
		t.Helper()
		code, out, errOut := cli("dlq", "list", "-json")
		var dls []map[string]any
		if err := json.Unmarshal([]byte(out), &dls); code != 0 || err != nil || dls == nil {
			t.Fatalf("dlq list -json: exit %d, %q (%v), want a JSON array\n%s", code, out, err, errOut)
		}
		return dls
	}
	if dls := listJSON(); len(dls) != 1 || dls[0]["consumer"] != "agent" || dls[0]["subject"] != "in.github.issues" ||
		dls[0]["seq"] == nil || dls[0]["reason"] == nil || dls[0]["envelope"].(map[string]any)["id"] != e.ID {
		t.Errorf("dlq list -json = %v, want the dead letter of %s with its seq, consumer, subject and reason", dls, e.ID)
	}
	ccancel()
	<-consumed
	if code, out, errOut := cli("dlq", "replay", "--all"); code != 0 || !strings.Contains(out, "replayed 1") {
		t.Fatalf("replay: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, _ := cli("dlq", "list"); code != 0 || !strings.Contains(out, "0 dead letter") {
		t.Errorf("after replay: exit %d\n%s", code, out)
	}
	if dls := listJSON(); len(dls) != 0 {
		t.Errorf("dlq list -json after replay = %v, want []", dls)
	}
	if code, _, errOut := cli("dlq", "replay", "abc"); code != 2 || !strings.Contains(errOut, "not a dead-letter sequence") {
		t.Errorf("bad replay id: exit %d %q, want 2 with an explanation", code, errOut)
	}
	stop()
}

// TestBinarySIGTERM builds the real binary and runs it as docker compose
// would: it becomes ready with no servers configured and exits 0 on SIGTERM.
func TestBinarySIGTERM(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "builds the binary")
	bin := filepath.Join(t.TempDir(), "relay")
	build := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, "github.com/relaystation/relay/cmd/relay")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	checkBinaryVersion(t, bin)
	env := embeddedEnv(t)
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, "http://"+env["RELAY_HTTP_ADDR"]+"/readyz", http.StatusOK, 5*time.Second)
	t.Logf("binary ready after %s", time.Since(start))
	_ = cmd.Process.Signal(syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("no exit 20s after SIGTERM")
	}
}

// A setting read by another service is not "unknown" to an operator command.
func TestOtherServicesSettingsAreKnown(t *testing.T) {
	t.Parallel()
	env := map[string]string{"RELAY_MCP_CONFIG": "/nonexistent/mcp.json", "RELAY_MEMORY_DIMENSIONS": "384", "RELAY_TYPO": "1"}
	var stderr syncBuffer
	code := Run(t.Context(), []string{"dlq", "list"}, config.FromMap(env), &syncBuffer{}, &stderr)
	if code == 0 {
		t.Fatal("got exit 0 with RELAY_TYPO set")
	}
	out := stderr.String()
	if !strings.Contains(out, "RELAY_TYPO") || strings.Contains(out, "RELAY_MEMORY_DIMENSIONS") || strings.Contains(out, "RELAY_MCP_CONFIG") {
		t.Errorf("got %q, want only RELAY_TYPO reported", out)
	}
}
