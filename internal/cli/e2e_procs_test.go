package cli

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// relayBinary builds the relay once per test run.
func relayBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "relay-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "relay")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/relaystation/relay/cmd/relay").CombinedOutput()
		if err != nil {
			buildErr = &exitError{code: 1, msg: string(out)}
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return binPath
}

// proc is one relay service running as its own process.
type proc struct {
	name string
	cmd  *exec.Cmd
	logs *syncBuffer
	addr string
	done chan error
}

func startProc(t *testing.T, bin, name string, env map[string]string) *proc {
	t.Helper()
	p := &proc{name: name, logs: &syncBuffer{}, addr: freeAddr(t), done: make(chan error, 1)}
	p.cmd = exec.Command(bin, name)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Env = append(p.cmd.Env, "RELAY_HTTP_ADDR="+p.addr, "RELAY_DATA_DIR="+t.TempDir())
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", p.name, p.logs.String())
		}
	})
	waitHTTP(t, "http://"+p.addr+"/readyz", http.StatusOK, 30*time.Second)
	return p
}

// kill ends the process without any chance to clean up, as a crash would.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	<-p.done
	p.done <- nil // for the cleanup
}

// TestSeparateProcesses runs every worker as its own process on one NATS
// server, as docker compose does, and kills the approvals and outbound
// workers between the suggestion and the approval.
func TestSeparateProcesses(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "end-to-end with processes")
	bin := relayBinary(t)
	nb := bustest.Embedded(t) // the NATS server the processes share
	s := &stack{t: t, slack: fakes.NewSlack(t), gh: fakes.NewGitHub(t)}
	s.llm = fakes.NewLLM(t, script)
	env := stackEnv(t, s.slack, s.gh, s.llm)
	for _, k := range []string{"RELAY_HTTP_ADDR", "RELAY_NATS_LISTEN", "RELAY_DATA_DIR"} {
		delete(env, k)
	}
	env["NATS_URL"] = nb.ClientURL()

	procs := map[string]*proc{}
	for _, name := range []string{"toolrunner", "memory", "outbound", "approvals", "agent", "ingest"} {
		procs[name] = startProc(t, bin, name, env)
	}
	s.base = "http://" + procs["ingest"].addr
	s.attach(t, nb.ClientURL())

	num := 3001
	post := s.approvalPost(s.issueOpened(num, "processes"))

	// Crash the approvals and outbound workers, then bring them back.
	procs["approvals"].kill(t)
	procs["outbound"].kill(t)
	startProc(t, bin, "approvals", env)
	startProc(t, bin, "outbound", env)

	s.click(e2eApprover, post, "approve")
	s.click(e2eApprover, post, "approve") // and a double click across the restart
	s.exactlyOneComment(num)
	s.updatedTo(post, e2eApprover)
}
