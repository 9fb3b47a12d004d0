package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The roles the test binary plays for TestToolServerCannotReadRelaySecrets.
const (
	protectRoleEnv = "RELAY_PROTECT_TEST_ROLE"
	protectCanary  = "RELAY_PROTECT_TEST_CANARY"
)

// TestToolServerCannotReadRelaySecrets starts a "relay" (this test binary,
// calling ProtectProcess as main does) with a canary secret in its
// environment, which starts a "tool server" under the same user that tries
// the relay's /proc/<ppid>/environ, cmdline and mem. As root both run as
// nobody (65534): root reads any /proc file, and another user could not read
// environ anyway, so only the same user shows what non-dumpable protects.
func TestToolServerCannotReadRelaySecrets(t *testing.T) {
	if main, err := os.ReadFile("../../cmd/relay/main.go"); err != nil || !bytes.Contains(main, []byte("cli.ProtectProcess()")) {
		t.Errorf("cmd/relay/main.go does not call cli.ProtectProcess() first (%v)", err)
	}
	dir, err := os.MkdirTemp("", "relay-protect-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The go test binary's folder is private to its user: copy it where
	// nobody can run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "relay.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	canary := "canary-" + strconv.Itoa(os.Getpid()) + "-x9Q2vLr7TzP4"
	cmd := exec.Command(bin, "-test.run=^TestProtectHelper$")
	cmd.Dir = dir
	cmd.Env = []string{protectRoleEnv + "=relay", "RELAY_SLACK_BOT_TOKEN=" + canary, protectCanary + "=" + canary}
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("relay process: %v\n%s", err, out)
	}
	report := string(out)
	t.Logf("tool server report:\n%s", report)
	for _, what := range []string{"environ", "cmdline", "mem"} {
		if !strings.Contains(report, "tried "+what) {
			t.Errorf("the tool server did not try %s:\n%s", what, report)
		}
	}
	if strings.Contains(report, "CANARY FOUND") || strings.Contains(report, canary) {
		t.Errorf("the tool server read the relay's secret:\n%s", report)
	}
}

// TestProtectHelper is the relay and the tool server of
// TestToolServerCannotReadRelaySecrets; run alone it does nothing.
func TestProtectHelper(t *testing.T) {
	switch os.Getenv(protectRoleEnv) {
	case "relay":
		if err := ProtectProcess(); err != nil {
			fmt.Println("protect:", err)
			os.Exit(1)
		}
		// As the tool runner does: an allowlisted environment without the
		// secret; the server must find it in the parent, if anywhere.
		srv := exec.Command(os.Args[0], "-test.run=^TestProtectHelper$")
		srv.Env = []string{protectRoleEnv + "=server", "PATH=" + os.Getenv("PATH")}
		srv.Stdin = strings.NewReader(os.Getenv(protectCanary)) // the server's yardstick only
		out, err := srv.CombinedOutput()
		os.Stdout.Write(censor(out))
		if err != nil {
			fmt.Println("server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "server":
		canary, _ := io.ReadAll(os.Stdin)
		ppid := os.Getppid()
		try := func(what string, read func() ([]byte, error)) {
			b, err := read()
			fmt.Printf("tried %s: %d bytes, err=%v\n", what, len(b), err)
			if len(canary) > 0 && bytes.Contains(b, canary) {
				fmt.Printf("CANARY FOUND in %s\n", what)
			}
		}
		proc := fmt.Sprintf("/proc/%d/", ppid)
		try("environ", func() ([]byte, error) { return os.ReadFile(proc + "environ") })
		try("cmdline", func() ([]byte, error) { return os.ReadFile(proc + "cmdline") })
		try("mem", func() ([]byte, error) { return readStack(proc) })
		os.Exit(0)
	}
}

// readStack reads the process's stack through /proc/<pid>/mem: the initial
// environment block lies at its top.
func readStack(proc string) ([]byte, error) {
	maps, err := os.Open(proc + "maps")
	if err != nil {
		return nil, err
	}
	defer maps.Close()
	var lo, hi uint64
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), "[stack]") {
			if _, err := fmt.Sscanf(sc.Text(), "%x-%x", &lo, &hi); err != nil {
				return nil, err
			}
		}
	}
	if hi == 0 {
		return nil, fmt.Errorf("no [stack] in maps")
	}
	mem, err := os.Open(proc + "mem")
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	buf := make([]byte, hi-lo)
	n, err := mem.ReadAt(buf, int64(lo))
	return buf[:n], err
}

// censor keeps the relay role from echoing the canary it holds itself; only
// the server's own report (which says "CANARY FOUND") reaches the test.
func censor(b []byte) []byte {
	if c := os.Getenv(protectCanary); c != "" {
		return bytes.ReplaceAll(b, []byte(c), []byte("[canary]"))
	}
	return b
}
