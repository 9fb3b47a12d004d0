package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/procs"
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

// startService runs `bin name` as its own process with env, HOME and
// RELAY_DATA_DIR in dataDir and RELAY_HTTP_ADDR addr, its log written to
// logs, and waits until its /readyz answers 200 (within 30 s).
func startService(ctx context.Context, bin, name, addr, dataDir string, env map[string]string, logs io.Writer) (*procs.Process, error) {
	cmd := exec.Command(bin, name)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "HOME="+dataDir, "RELAY_HTTP_ADDR="+addr, "RELAY_DATA_DIR="+dataDir)
	cmd.Stderr = logs
	p, err := procs.Start(cmd)
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(ctx, "http://"+addr+"/readyz", 30*time.Second); err != nil {
		return p, fmt.Errorf("%s %w", name, err)
	}
	return p, nil
}

// proc is one relay service running as its own process until the test ends.
type proc struct {
	*procs.Process
	addr string
}

func startProc(t *testing.T, bin, name string, env map[string]string) *proc {
	t.Helper()
	logs := &syncBuffer{}
	p := &proc{addr: freeAddr(t)}
	var err error
	p.Process, err = startService(t.Context(), bin, name, p.addr, t.TempDir(), env, logs)
	if p.Process != nil {
		t.Cleanup(func() {
			p.Stop(20 * time.Second)
			if t.Failed() {
				t.Logf("%s log:\n%s", name, logs.String())
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
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

	running := map[string]*proc{}
	for _, name := range []string{"toolrunner", "memory", "outbound", "approvals", "agent", "ingest"} {
		running[name] = startProc(t, bin, name, env)
	}
	s.base = "http://" + running["ingest"].addr
	s.attach(t, nb.ClientURL())

	num := 3001
	post := s.approvalPost(s.issueOpened(num, "processes"))

	// Crash the approvals and outbound workers, then bring them back.
	running["approvals"].Kill()
	running["outbound"].Kill()
	startProc(t, bin, "approvals", env)
	startProc(t, bin, "outbound", env)

	s.click(e2eApprover, post, "approve")
	s.click(e2eApprover, post, "approve") // and a double click across the restart
	s.exactlyOneComment(num)
	s.updatedTo(post, e2eApprover)
}
