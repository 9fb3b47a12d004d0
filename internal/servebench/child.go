package servebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/relaystation/relay/internal/fakes"
)

// Settings of the child shared by every target, beside its ports and
// directories.
const (
	webhookSecret   = "bench-webhook-secret"
	approvalChannel = "C0BENCH"
)

// child is the relay under load, running as its own process.
type child struct {
	cmd     *exec.Cmd
	base    string // http://addr of its gateway
	natsURL string // its embedded NATS server
	logs    *tail
	exited  chan struct{}
	err     error // set when exited is closed
}

// childEnv is the child's whole environment: the fakes' URLs, free loopback
// ports, a data directory in dir, and no MCP servers (the model answers
// without tools); the model only when agent is set.
func childEnv(dir string, f *fakeSet, agent bool) ([]string, error) {
	mcp := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(mcp, []byte(`{"servers": {}}`), 0o600); err != nil {
		return nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	natsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir(),
		"RELAY_HTTP_ADDR=" + httpAddr, "RELAY_NATS_LISTEN=" + natsAddr,
		"RELAY_DATA_DIR=" + filepath.Join(dir, "data"), "RELAY_LOG_LEVEL=warn",
		"RELAY_MCP_CONFIG=" + mcp,
		"GITHUB_WEBHOOK_SECRET=" + webhookSecret,
		"GITHUB_API_URL=" + f.gh.URL(), "GITHUB_TOKEN=ghp_bench00000000000000000000000000000000",
		"SLACK_API_URL=" + f.slack.URL(), "SLACK_BOT_TOKEN=xoxb-bench-token", "SLACK_SIGNING_SECRET=bench-slack-secret",
		"SLACK_APPROVAL_CHANNEL=" + approvalChannel, "SLACK_APPROVERS=U0BENCH",
	}
	if agent {
		env = append(env, "LLM_BASE_URL="+f.llm.URL(), "LLM_MODEL=instant")
	}
	return env, nil
}

// startChild runs the relay binary as target's service in dir and waits
// until it is ready. With profile set, the child writes a CPU profile there.
func startChild(ctx context.Context, cfg Config, t Target, dir, profile string, f *fakeSet) (*child, error) {
	env, err := childEnv(dir, f, t.Agent)
	if err != nil {
		return nil, err
	}
	args := []string{t.Service}
	if profile != "" {
		args = []string{"bench", "proc", "-cpuprofile", profile, t.Service}
	}
	bin := cfg.Binary
	if t.Binary != "" {
		bin = t.Binary
	}
	c := &child{cmd: exec.Command(bin, args...), logs: &tail{}, exited: make(chan struct{})}
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "RELAY_HTTP_ADDR="); ok {
			c.base = "http://" + v
		}
		if v, ok := strings.CutPrefix(kv, "RELAY_NATS_LISTEN="); ok {
			c.natsURL = "nats://" + v
		}
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s %s: %w", bin, t.Service, err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	if err := c.waitReady(ctx, time.Minute); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// waitReady polls /readyz until it answers 200, the child exits, or d passes.
func (c *child) waitReady(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		resp, err := http.Get(c.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-c.exited:
			return fmt.Errorf("relay exited before it was ready (%v); log:\n%s", c.err, c.logs)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return fmt.Errorf("relay not ready after %s; log:\n%s", d, c.logs)
}

// stop ends the child with SIGTERM (its drain), then SIGKILL after 30 s.
func (c *child) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("relay did not stop within 30s of SIGTERM; log:\n%s", c.logs)
	}
	var exit *exec.ExitError
	if c.err != nil && !errors.As(c.err, &exit) {
		return c.err
	}
	if c.err != nil {
		return fmt.Errorf("relay exited with %v; log:\n%s", c.err, c.logs)
	}
	return nil
}

// cpu is the child's user + system CPU time so far (Linux /proc).
func (c *child) cpu() (time.Duration, error) {
	return procCPU(c.cmd.Process.Pid)
}

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat times; 100
// on every Linux architecture Go supports.
const clockTick = 100

// procCPU reads utime + stime of pid from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("CPU time of the relay (needs Linux /proc): %w", err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(raw, ')')
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // utime, stime: fields 14 and 15 of the line
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// freeAddr is a loopback address nothing listens on right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// tail keeps the last 16 kB written to it, for error messages. Safe for
// concurrent use.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 16<<10; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// fakeSet are the instant fakes of one run; close stops them.
type fakeSet struct {
	slack *fakes.Slack
	gh    *fakes.GitHub
	llm   *fakes.LLM
	owner cleanups
}

func newFakes() *fakeSet {
	f := &fakeSet{}
	f.slack = fakes.NewSlack(&f.owner)
	f.gh = fakes.NewGitHub(&f.owner)
	f.llm = fakes.NewLLM(&f.owner, func(*fakes.ChatRequest) fakes.Reply {
		return fakes.Reply{Text: "Thanks for the report, we will look into it."}
	})
	return f
}

func (f *fakeSet) close() { f.owner.run() }

// cleanups is a fakes.Cleaner outside tests.
type cleanups []func()

// Cleanup registers fn to run at close, last registered first.
func (c *cleanups) Cleanup(fn func()) { *c = append(*c, fn) }

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
	*c = nil
}
