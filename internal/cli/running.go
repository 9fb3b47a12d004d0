package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/services/console"
)

// runningFile is the file in RELAY_DATA_DIR where `relay serve` records
// where it listens, so that operator commands started from the same folder
// (`relay trace`, `relay dlq`, `relay send`) find it before any default
// address.
const runningFile = "relay.json"

// running is what `relay serve` records in its data dir. Never a secret: no
// token, no credentials in the URLs.
type running struct {
	PID int `json:"pid"`
	// NATS is the URL of the bus: the embedded server's listener, or
	// NATS_URL without credentials.
	NATS string `json:"nats"`
	// HTTP is the base URL of the webhooks ("http://127.0.0.1:8080").
	HTTP string `json:"http,omitempty"`
	// Console is the base URL of the console, when it runs.
	Console string    `json:"console,omitempty"`
	Started time.Time `json:"started"`
}

// runningPath is the record's path in dataDir.
func runningPath(dataDir string) string { return filepath.Join(dataDir, runningFile) }

// writeRunning records r in dataDir (written to a temporary file, then
// renamed, so a reader never sees half of it) and returns the function that
// removes it again, if it is still this process's record.
func writeRunning(dataDir string, r running) (remove func(), err error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("RELAY_DATA_DIR %s: %w", dataDir, err)
	}
	path := runningPath(dataDir)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("record where the relay listens: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("record where the relay listens: %w", err)
	}
	return func() {
		if cur, err := readRunning(dataDir); err == nil && cur.PID == r.PID && cur.Started.Equal(r.Started) {
			_ = os.Remove(path)
		}
	}, nil
}

// errNotRunning reports a record whose process is gone.
var errNotRunning = errors.New("its process is gone")

// readRunning reads the record in dataDir; fs.ErrNotExist when there is
// none, errNotRunning when the process that wrote it no longer runs.
func readRunning(dataDir string) (running, error) {
	var r running
	b, err := os.ReadFile(runningPath(dataDir))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", runningPath(dataDir), err)
	}
	if r.NATS == "" {
		return r, fmt.Errorf("%s: no nats address", runningPath(dataDir))
	}
	if r.PID > 0 && !alive(r.PID) {
		return r, errNotRunning
	}
	return r, nil
}

// alive reports whether a process with pid runs (signal 0 reaches it).
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// busURL is the bus address an operator command connects to, and the
// sentence (for stderr) that says where it came from: NATS_URL when set,
// else the relay recorded in RELAY_DATA_DIR, else RELAY_NATS_LISTEN.
func (a *app) busURL() (url, why string) {
	if a.base.NATSURL != "" {
		return a.base.NATSURL, "NATS_URL"
	}
	r, err := readRunning(a.base.DataDir)
	switch {
	case err == nil:
		return r.NATS, fmt.Sprintf("the relay started from this folder (pid %d, recorded in %s)", r.PID, runningPath(a.base.DataDir))
	case errors.Is(err, fs.ErrNotExist):
		return "nats://" + a.base.NATSListen, fmt.Sprintf("RELAY_NATS_LISTEN (no relay recorded in %s)", runningPath(a.base.DataDir))
	case errors.Is(err, errNotRunning):
		return "nats://" + a.base.NATSListen, fmt.Sprintf("RELAY_NATS_LISTEN (the relay recorded in %s, pid %d, no longer runs)", runningPath(a.base.DataDir), r.PID)
	default:
		return "nats://" + a.base.NATSListen, fmt.Sprintf("RELAY_NATS_LISTEN (%v)", err)
	}
}

// httpURL is the base URL of the relay's webhooks for `relay send`, and
// where it came from: the relay recorded in RELAY_DATA_DIR, else
// RELAY_HTTP_ADDR.
func (a *app) httpURL() (base, why string) {
	if r, err := readRunning(a.base.DataDir); err == nil && r.HTTP != "" {
		return r.HTTP, fmt.Sprintf("the relay started from this folder (pid %d, recorded in %s)", r.PID, runningPath(a.base.DataDir))
	}
	return "http://" + dialable(a.base.HTTPAddr), "RELAY_HTTP_ADDR"
}

// consoleURL is the console's base URL: the recorded one, else "".
func (a *app) consoleURL() string {
	if r, err := readRunning(a.base.DataDir); err == nil {
		return r.Console
	}
	return ""
}

// dialable turns a listen address into one a client on this machine dials:
// ":8080" and "0.0.0.0:8080" become "127.0.0.1:8080".
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// withoutUserinfo is the URL list u (NATS_URL: comma-separated) without
// credentials, for the record.
func withoutUserinfo(u string) string {
	parts := strings.Split(u, ",")
	for i, s := range parts {
		p, err := url.Parse(strings.TrimSpace(s))
		if err != nil {
			return ""
		}
		p.User = nil
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

// freeNATSListen moves the embedded server off the default RELAY_NATS_LISTEN
// when that is taken (the machine's own NATS on 4222) and the operator did
// not choose it: the relay then listens on a free port and records it in
// its data dir, where the operator commands look first.
func (a *app) freeNATSListen() {
	if a.base.NATSURL != "" || a.base.NATSListenSet {
		return
	}
	ln, err := net.Listen("tcp", a.base.NATSListen)
	if err == nil {
		_ = ln.Close()
		return
	}
	host, _, _ := net.SplitHostPort(a.base.NATSListen)
	a.log.Warn("the default embedded NATS address is taken (another NATS server?): listening on a free port; operator commands started from this folder find it in the data dir",
		"taken", a.base.NATSListen, "record", runningPath(a.base.DataDir))
	a.base.NATSListen = net.JoinHostPort(host, "0")
}

// recordRunning writes where this relay listens into its data dir; the
// returned function removes the record.
func (a *app) recordRunning(svcs []*service, b *bus.Bus, start time.Time) (func(), error) {
	r := running{PID: os.Getpid(), NATS: withoutUserinfo(b.ClientURL()), Started: start.UTC()}
	if a.httpListening != "" {
		r.HTTP = "http://" + dialable(a.httpListening)
	}
	for _, s := range svcs {
		if s.name == "console" {
			r.Console = "http://" + dialable(a.env.String("RELAY_CONSOLE_ADDR", console.DefaultAddr))
		}
	}
	return writeRunning(a.base.DataDir, r)
}
