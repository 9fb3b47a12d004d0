package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Everything starts `mcp-server-everything <mode>` on a free port and
// returns its host:port. It waits for the server to say it listens (not for
// the port to answer: another process may have taken the port meanwhile)
// and starts over on a new port when the server exits first.
func Everything(t testing.TB, mode string) string {
	t.Helper()
	bin := NPMBin(t, "mcp-server-everything")
	for attempt := 1; ; attempt++ {
		addr, err := tryEverything(t, bin, mode)
		if err == nil {
			return addr
		}
		if attempt == 3 {
			t.Fatalf("mcp-server-everything %s: %v", mode, err)
		}
		t.Logf("mcp-server-everything %s: %v; trying another port", mode, err)
	}
}

func tryEverything(t testing.TB, bin, mode string) (string, error) {
	port := strconv.Itoa(FreePort(t))
	cmd := exec.Command(bin, mode)
	cmd.Env = append(os.Environ(), "PORT="+port)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{})
	exited := make(chan struct{})
	var mu sync.Mutex
	var lines []string
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			lines = append(lines, line)
			mu.Unlock()
			if !said && strings.Contains(line, "port "+port) && !strings.Contains(line, "in use") {
				said = true
				close(listening)
			}
		}
		_ = cmd.Wait()
	}()
	stop := func() { _ = cmd.Process.Kill(); <-exited }
	select {
	case <-listening:
		t.Cleanup(stop)
		return "127.0.0.1:" + port, nil
	case <-exited:
	case <-time.After(30 * time.Second):
		stop()
	}
	mu.Lock()
	defer mu.Unlock()
	return "", fmt.Errorf("not listening on port %s: %s", port, strings.Join(lines, " | "))
}
