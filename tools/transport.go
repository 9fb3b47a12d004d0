package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// ErrPipeUnsupported refuses pipe:// URLs (Windows named pipes).
var ErrPipeUnsupported = errors.New("Windows named pipes are not supported on this platform")

// transport builds the SDK transport of s; principal names whose OAuth
// grant it sends ("" the runner's, peruser.go). For stdio it also returns
// the command (started by the SDK's Connect).
func transport(r *Runner, s mcpconfig.Server, log *slog.Logger, principal string) (mcp.Transport, *stdioProc, error) {
	switch s.Type {
	case mcpconfig.Stdio:
		return stdioTransport(r, s, log)
	case mcpconfig.HTTP, mcpconfig.SSE:
		endpoint, client, err := remoteEndpoint(r.cfg.HTTPClient, s)
		if err != nil {
			return nil, nil, err
		}
		oauth, err := r.oauthHandler(s, principal) // oauth.go
		if err != nil {
			return nil, nil, err
		}
		if s.Type == mcpconfig.HTTP {
			client = r.taskClient(client, s.Name) // tasks.go: held sessions, execution modes
		}
		return remoteTransport(s, endpoint, client, oauth, r.cfg.StreamRetries), nil, nil
	}
	return nil, nil, fmt.Errorf("server %s: unknown transport %q", s.Name, s.Type)
}

// remoteTransport is the SDK transport of remote server s (type http or
// sse) at endpoint, sending its requests with client and authorizing them
// with oauth (nil for none).
func remoteTransport(s mcpconfig.Server, endpoint string, client *http.Client, oauth auth.OAuthHandler, retries int) mcp.Transport {
	if s.Type == mcpconfig.SSE {
		// The SDK's SSE client has no OAuthHandler: the relay's transport
		// does its part (oauth_sse.go).
		return &detached{Transport: &mcp.SSEClientTransport{Endpoint: endpoint, HTTPClient: withOAuth(client, oauth)}}
	}
	// The SDK follows the spec's resumability: it reconnects the GET stream
	// (and a broken POST response stream) after the server's SSE `retry`
	// delay, sending Last-Event-ID; retries bounds the attempts without
	// progress.
	return &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: client, MaxRetries: retries, OAuthHandler: oauth}
}

// stdioProc is a stdio server's command and its last stderr lines.
type stdioProc struct {
	*exec.Cmd
	tail *stderrTail
}

// exited adds to err, a call's lost connection, that the server process
// exited and its last stderr lines (redacted, bounded), when its stderr
// ends within stderrDrain (the process is gone: it held the pipe's write
// end). Else err is returned as it is.
func (p *stdioProc) exited(rd *Redactor, err error) error {
	select {
	case <-p.tail.done:
	case <-time.After(stderrDrain):
		return err
	}
	tail := p.tail.last()
	if tail == "" {
		return fmt.Errorf("%w; the server process exited during the call and wrote nothing on stderr", err)
	}
	tail, _ = rd.String(tail)
	return fmt.Errorf("%w; the server process exited during the call; server stderr (last lines):\n%s", err, tail)
}

func stdioTransport(r *Runner, s mcpconfig.Server, log *slog.Logger) (mcp.Transport, *stdioProc, error) {
	cmd := exec.Command(s.Command, s.Args...)
	cmd.Env = stdioEnv(r.cfg.BaseEnv, s.Env)
	cmd.Dir = s.Dir
	// The relay's own pipe, not cmd.StderrPipe: Wait closes that one at
	// once, losing the last lines a failing server wrote (its reason).
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = stderrW
	tail := &stderrTail{done: make(chan struct{})}
	go func() {
		defer close(tail.done)
		defer stderr.Close()
		logStderr(stderr, log, r.cfg.StderrLevel, tail.add)
	}()
	return &stdioCommand{cmd: cmd, terminate: r.cfg.TerminateDuration, log: log, tail: tail, stderrW: stderrW, server: s.Name, modes: &r.modes},
		&stdioProc{Cmd: cmd, tail: tail}, nil
}

// Bounds of the stderr lines an error shows.
const (
	stderrTailLines   = 10
	stderrTailLineLen = 300
)

// stderrTail keeps a stdio server's last stderr lines, for the error of a
// handshake or call that failed: the server usually says there why.
type stderrTail struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{} // closed when stderr is at its end
}

func (t *stderrTail) add(line string) {
	if len(line) > stderrTailLineLen {
		line = line[:stderrTailLineLen] + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > stderrTailLines {
		t.lines = t.lines[len(t.lines)-stderrTailLines:]
	}
}

// text waits up to d for stderr to end (the process was killed) and
// returns its last lines.
func (t *stderrTail) text(d time.Duration) string {
	select {
	case <-t.done:
	case <-time.After(d):
	}
	return t.last()
}

// last returns the lines kept so far.
func (t *stderrTail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// stderrDrain bounds the wait for a failed server's stderr to end.
const stderrDrain = 2 * time.Second

// handshakeError names the cause of a stdio server's failed handshake and
// adds its last stderr lines (redacted); the process has been killed.
func handshakeError(r *Runner, t mcp.Transport, err error) error {
	sc, ok := t.(*stdioCommand)
	if !ok {
		return err
	}
	msg := err.Error()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(msg, "EOF") || strings.Contains(msg, "broken pipe") || strings.Contains(msg, "file already closed") {
		err = fmt.Errorf("the server exited or closed its stdout during the handshake (%w)", err)
	}
	tail := sc.tail.text(stderrDrain)
	if tail == "" {
		return fmt.Errorf("%w; the server wrote nothing on stderr", err)
	}
	if red, ok := r.redactor.String(tail); ok {
		tail = red
	}
	return fmt.Errorf("%w; server stderr (last lines):\n%s", err, tail)
}

// stdioCommand is the SDK's CommandTransport with one difference, as in the
// TypeScript client: a line on the server's stdout that is not JSON (a
// banner, a stray log line) is skipped with a warning instead of ending the
// session.
type stdioCommand struct {
	cmd       *exec.Cmd
	terminate time.Duration
	log       *slog.Logger
	tail      *stderrTail
	stderrW   *os.File // the child's end of the stderr pipe, closed here once started
	// server and modes: the connection is a sideConn (taskwire.go).
	server string
	modes  *toolModes
}

func (t *stdioCommand) Connect(ctx context.Context) (mcp.Connection, error) {
	// Once started the child holds its own copy of the stderr pipe's write
	// end: the reader sees EOF when the child exits.
	defer t.stderrW.Close()
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	td := t.terminate
	if td <= 0 {
		td = 5 * time.Second
	}
	rd := &jsonLines{br: bufio.NewReader(stdout), log: t.log}
	conn, err := (&mcp.IOTransport{Reader: io.NopCloser(rd), Writer: &stdinCloser{WriteCloser: stdin, cmd: t.cmd, terminate: td}}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	side := newSideConn(conn, t.server, t.modes)
	if slot, ok := ctx.Value(sideKey{}).(*sideSlot); ok {
		slot.set(side)
	}
	return side, nil
}

// stdinCloser ends a stdio server as the spec says: close its stdin, wait,
// then SIGTERM, then SIGKILL.
type stdinCloser struct {
	io.WriteCloser
	cmd       *exec.Cmd
	terminate time.Duration
}

func (s *stdinCloser) Close() error {
	if err := s.WriteCloser.Close(); err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	wait := func() (error, bool) {
		t := time.NewTimer(s.terminate)
		defer t.Stop()
		select {
		case err := <-done:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := s.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("unresponsive subprocess")
}

// nonJSONWarnEvery rate-limits the warning about skipped stdout lines.
const nonJSONWarnEvery = 10 * time.Second

// jsonLines passes on the lines of a stdio server's stdout that can be
// JSON-RPC (valid JSON starting with '{' or '[', as the TypeScript client's
// JSON.parse decides) and skips the others, warning at most
// once per nonJSONWarnEvery with the count skipped.
type jsonLines struct {
	br      *bufio.Reader
	log     *slog.Logger
	pending []byte
	skipped int
	warned  time.Time
}

func (j *jsonLines) Read(p []byte) (int, error) {
	for len(j.pending) == 0 {
		line, err := j.br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) == 0 || (t[0] == '{' || t[0] == '[') && json.Valid(t) {
			j.pending = line
		} else {
			j.skip(t)
		}
		if err != nil {
			if len(j.pending) > 0 {
				break
			}
			return 0, err
		}
	}
	n := copy(p, j.pending)
	j.pending = j.pending[n:]
	return n, nil
}

func (j *jsonLines) skip(line []byte) {
	j.skipped++
	if now := time.Now(); now.Sub(j.warned) >= nonJSONWarnEvery {
		j.warned = now
		if len(line) > 200 {
			line = line[:200]
		}
		j.log.Warn("server wrote a line that is not JSON-RPC on stdout; skipped", "line", strings.ToValidUTF8(string(line), "?"), "skipped", j.skipped)
		j.skipped = 0
	}
}

// maxStderrLine bounds one logged stderr line; the rest of a longer line is
// read and dropped, so the pipe never stalls.
const maxStderrLine = 4096

// logStderr copies a stdio server's stderr to the log, line by line, at
// level. A line of any length is read to its end (a server blocked on a full
// stderr pipe would stop answering); one over maxStderrLine bytes is logged
// cut, with the number of bytes left out.
func logStderr(rd io.Reader, log *slog.Logger, level slog.Level, keep func(string)) {
	br := bufio.NewReaderSize(rd, maxStderrLine)
	for {
		line, err := br.ReadSlice('\n')
		text := strings.TrimRight(string(line), "\r\n")
		dropped := 0
		for errors.Is(err, bufio.ErrBufferFull) {
			var more []byte
			more, err = br.ReadSlice('\n')
			dropped += len(bytes.TrimRight(more, "\r\n"))
		}
		if (text != "" || dropped > 0 || err == nil) && keep != nil {
			keep(text)
		}
		if text != "" || dropped > 0 || err == nil {
			if dropped > 0 {
				log.Log(context.Background(), level, "server stderr", "line", text, "cut_bytes", dropped)
			} else {
				log.Log(context.Background(), level, "server stderr", "line", text)
			}
		}
		if err != nil {
			return
		}
	}
}

// remoteEndpoint returns the HTTP endpoint and client of a remote server:
// the entry's headers on every request and, for unix:// URLs, every
// connection dialled to the socket.
//
// unix:///path/to.sock carries HTTP over the Unix socket; the HTTP path is
// the URL's fragment (unix:///run/mcp.sock#/mcp) or "/".
func remoteEndpoint(base *http.Client, s mcpconfig.Server) (string, *http.Client, error) {
	u, err := url.Parse(s.URL)
	if err != nil {
		return "", nil, fmt.Errorf("server %s: url: %w", s.Name, err)
	}
	switch u.Scheme {
	case "pipe":
		return "", nil, fmt.Errorf("server %s: %s: %w", s.Name, s.URL, ErrPipeUnsupported)
	case "unix":
		sock, path := mcpconfig.UnixSocket(u)
		client := unixClient(base, sock)
		return "http://localhost" + path, withAuthProbe(withHeaders(client, s.Headers)), nil
	}
	return s.URL, withAuthProbe(withHeaders(base, s.Headers)), nil
}

// unixClient is base with a transport that dials sock for every request.
func unixClient(base *http.Client, sock string) *http.Client {
	c := http.Client{}
	if base != nil {
		c = *base
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	c.Transport = t
	return &c
}

type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	return h.base.RoundTrip(req)
}

func withHeaders(base *http.Client, headers map[string]string) *http.Client {
	if base == nil {
		base = http.DefaultClient
	}
	if len(headers) == 0 {
		return base
	}
	return wrapClient(base, func(rt http.RoundTripper) http.RoundTripper { return &headerTransport{base: rt, headers: headers} })
}

// detached gives a transport a connection context that outlives Connect:
// the SDK's SSE client ties its event stream to the context Connect gets, so
// a connect timeout would end the session as soon as Connect returned. The
// stream lives until the connection is closed; ctx still bounds the dial.
type detached struct {
	mcp.Transport
}

func (d *detached) Connect(ctx context.Context) (mcp.Connection, error) {
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel) // a cancelled dial still ends
	conn, err := d.Transport.Connect(life)
	if !stop() || err != nil {
		cancel()
		if err == nil {
			_ = conn.Close()
			err = context.Cause(ctx)
		}
		return nil, err
	}
	return &cancelOnClose{Connection: conn, cancel: cancel}, nil
}

type cancelOnClose struct {
	mcp.Connection
	once   sync.Once
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.Connection.Close()
	c.once.Do(c.cancel)
	return err
}

// hint adds what to change to a connect error a user can fix in mcp.json.
func hint(s mcpconfig.Server, err error) error {
	if s.Type == mcpconfig.HTTP && s.TypeInferred {
		msg := err.Error()
		if strings.Contains(msg, "Not Found") || strings.Contains(msg, "404") || strings.Contains(msg, "Method Not Allowed") || strings.Contains(msg, "405") {
			return fmt.Errorf("%w (the entry has a url and no type, so streamable HTTP was tried; if %s is an SSE endpoint, set \"type\": \"sse\")", err, s.URL)
		}
	}
	return err
}
