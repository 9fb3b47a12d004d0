package servebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/procs"
)

// Settings of the child shared by every target, beside its ports and
// directories.
const (
	webhookSecret   = "bench-webhook-secret"
	approvalChannel = "C0BENCH"
)

// child is the relay under load, running as its own process.
type child struct {
	*Process
	base    string // http://addr of its gateway
	natsURL string // its embedded NATS server
}

// Process is a server under load running as a child process, so that its
// CPU time (from /proc) is its own and not the load generator's. Its
// methods are safe for concurrent use.
type Process struct {
	proc *procs.Process
	name string // the executable's base name, for errors
	logs *tail
}

// Start starts cmd, its output kept for error messages (the last 16 kB),
// and waits until GET ready answers 200; it fails when the process exits
// first or is not ready within a minute, and then has stopped it.
func Start(ctx context.Context, cmd *exec.Cmd, ready string) (*Process, error) {
	p := &Process{name: filepath.Base(cmd.Path), logs: &tail{}}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	var err error
	if p.proc, err = procs.Start(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	if err := p.proc.WaitReady(ctx, ready, time.Minute); err != nil {
		_ = p.Stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s %w; log:\n%s", p.name, err, p.logs)
	}
	return p, nil
}

// Logs is the end of what the process wrote to stdout and stderr.
func (p *Process) Logs() string { return p.logs.String() }

// childEnv is the child's whole environment: the fakes' URLs, free loopback
// ports (gateway, NATS, console), a data directory in dir, and no MCP
// servers (the model answers without tools); the model only when agent is
// set.
func childEnv(dir string, f *fakeSet, agent bool) ([]string, error) {
	mcp := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(mcp, []byte(`{"servers": {}}`), 0o600); err != nil {
		return nil, err
	}
	httpAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	natsAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	// The console too: its default port may be taken by another relay.
	consoleAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir(),
		"RELAY_HTTP_ADDR=" + httpAddr, "RELAY_NATS_LISTEN=" + natsAddr, "RELAY_CONSOLE_ADDR=" + consoleAddr,
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
	// The serve benchmark measures throughput from one sender: no per-source
	// task limits (relay bench flood measures those).
	env = append(env, "RELAY_LIMIT_TASKS_PER_REPO=0", "RELAY_LIMIT_TASKS_PER_CHANNEL=0", "RELAY_LIMIT_TASKS_PER_ACTOR=0")
	args := []string{t.Service}
	if profile != "" {
		args = []string{"bench", "proc", "-cpuprofile", profile, t.Service}
	}
	bin := cfg.Binary
	if t.Binary != "" {
		bin = t.Binary
	}
	c := &child{}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "RELAY_HTTP_ADDR="); ok {
			c.base = "http://" + v
		}
		if v, ok := strings.CutPrefix(kv, "RELAY_NATS_LISTEN="); ok {
			c.natsURL = "nats://" + v
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	if c.Process, err = Start(ctx, cmd, c.base+"/readyz"); err != nil {
		return nil, fmt.Errorf("%s: %w", t.Service, err)
	}
	return c, nil
}

// Stop ends the process with SIGTERM (its drain), then SIGKILL after 30 s.
// An exit status other than 0 is an error carrying the process's log.
func (p *Process) Stop() error {
	if !p.proc.Stop(30 * time.Second) {
		return fmt.Errorf("%s did not stop within 30s of SIGTERM; log:\n%s", p.name, p.logs)
	}
	err := p.proc.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%s exited with %v; log:\n%s", p.name, err, p.logs)
	}
	return nil
}

// CPU is the process's user + system CPU time so far (Linux /proc).
func (p *Process) CPU() (time.Duration, error) {
	return procCPU(p.proc.Pid())
}

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat times; 100
// on every Linux architecture Go supports.
const clockTick = 100

// procCPU reads utime + stime of pid from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %d (needs Linux /proc): %w", pid, err)
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

// FreeAddr is a loopback address nothing listens on right now.
func FreeAddr() (string, error) {
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
