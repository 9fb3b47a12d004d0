package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/console"
)

// rawDo sends one request with the given Host and extra headers, carrying
// c's cookies, as a page on another origin (or a rebinding domain) would.
func (c *client) rawDo(method, path, host string, hdr map[string]string, form url.Values) int {
	c.t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, _ := http.NewRequestWithContext(c.t.Context(), method, c.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDNSRebindingRefused is the rebinding attack on the tokenless console:
// a page on evil.example resolving to 127.0.0.1 sends its own Host and
// Origin. It gets no page, no session and no action.
func TestDNSRebindingRefused(t *testing.T) {
	t.Parallel()
	base, _ := startConsole(t, console.Config{})
	port := base[strings.LastIndex(base, ":")+1:]
	evil := newClient(t, base)
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "127.0.0.1:1", "localhost"} {
		if code := evil.rawDo(http.MethodGet, "/dlq", host, nil, nil); code != http.StatusMisdirectedRequest {
			t.Errorf("GET /dlq with Host %q: %d, want 421", host, code)
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port} {
		if code := evil.rawDo(http.MethodGet, "/static/console.css", host, nil, nil); code != http.StatusOK {
			t.Errorf("GET with Host %q: %d, want 200", host, code)
		}
	}

	// The operator's own browser has a session and its CSRF token; the
	// rebinding page rides on them with a foreign Origin, or none.
	c := newClient(t, base)
	csrf := c.csrf("/dlq")
	form := url.Values{"csrf": {csrf}, "back": {"/dlq"}}
	for name, hdr := range map[string]map[string]string{
		"foreign Origin":       {"Origin": "http://evil.example:" + port},
		"foreign Referer":      {"Referer": "http://evil.example:" + port + "/x"},
		"no Origin or Referer": {},
		"null Origin":          {"Origin": "null"},
	} {
		if code := c.rawDo(http.MethodPost, "/dlq/replay-all", "", hdr, form); code != http.StatusForbidden {
			t.Errorf("POST with CSRF token and %s: %d, want 403", name, code)
		}
	}
	if code := c.rawDo(http.MethodPost, "/dlq/replay-all", "evil.example:"+port, map[string]string{"Origin": "http://evil.example:" + port}, form); code != http.StatusMisdirectedRequest {
		t.Errorf("POST with a rebinding Host and Origin: %d, want 421", code)
	}
	if code := c.rawDo(http.MethodPost, "/dlq/replay-all", "", map[string]string{"Referer": base + "/dlq"}, form); code != http.StatusSeeOther {
		t.Errorf("POST with a same-origin Referer: %d, want 303", code)
	}
	if code := c.rawDo(http.MethodPost, "/dlq/replay-all", "", map[string]string{"Origin": base}, form); code != http.StatusSeeOther {
		t.Errorf("POST with a same-origin Origin: %d, want 303", code)
	}
}

// TestTokenConsoleNeedsSameOrigin: with a token the Host may be any name
// (a proxy in front), but a state-changing request, the sign-in too, must
// come from the console's own origin.
func TestTokenConsoleNeedsSameOrigin(t *testing.T) {
	t.Parallel()
	const token = "console-t0ken-for-tests"
	base, _ := startConsole(t, console.Config{Addr: "0.0.0.0:" + fmt.Sprint(testenv.FreePort(t)), Token: secret.New(token)})
	c := newClient(t, base)
	login := url.Values{"operator": {"alice"}, "token": {token}}
	if code := c.rawDo(http.MethodPost, "/login", "", map[string]string{"Origin": "http://evil.example"}, login); code != http.StatusForbidden {
		t.Errorf("sign in from a foreign origin: %d, want 403", code)
	}
	if code := c.rawDo(http.MethodPost, "/login", "", map[string]string{"Origin": base}, login); code != http.StatusSeeOther {
		t.Fatalf("sign in: %d, want 303", code)
	}
	form := url.Values{"csrf": {c.csrf("/dlq")}}
	if code := c.rawDo(http.MethodPost, "/dlq/replay-all", "", map[string]string{"Origin": "http://evil.example"}, form); code != http.StatusForbidden {
		t.Errorf("POST from a foreign origin: %d, want 403", code)
	}
}

// TestNextAndBackStayOnTheConsole: the sign-in's next and an action's back
// send the browser only to a console path.
func TestNextAndBackStayOnTheConsole(t *testing.T) {
	t.Parallel()
	base, _ := startConsole(t, console.Config{})
	c := newClient(t, base)
	csrf := c.csrf("/dlq")
	hostile := []string{"/\\evil.example", "/%5Cevil.example", "/\t/evil.example", "/%09/evil.example", "//evil.example",
		"/%2F/evil.example", "https://evil.example/", "javascript:alert(1)", "evil.example", "/\r\n/evil.example", "/%0d%0a/evil.example", "///evil.example"}
	for _, next := range hostile {
		code, _, h := c.do(http.MethodGet, "/login?next="+url.QueryEscape(next), nil)
		if code != http.StatusSeeOther || h.Get("Location") != "/" {
			t.Errorf("GET /login?next=%q: %d to %q, want 303 to /", next, code, h.Get("Location"))
		}
		code, _, h = c.do(http.MethodPost, "/dlq/replay-all", url.Values{"csrf": {csrf}, "back": {next}})
		if loc := h.Get("Location"); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/?notice=") {
			t.Errorf("POST back=%q: %d to %q, want 303 to /?notice=…", next, code, loc)
		}
	}
	if code, _, h := c.do(http.MethodGet, "/login?next="+url.QueryEscape("/approvals?task=a%2Fb"), nil); code != http.StatusSeeOther || h.Get("Location") != "/approvals?task=a%2Fb" {
		t.Errorf("GET /login?next=/approvals?task=…: %d to %q, want the path kept", code, h.Get("Location"))
	}
}

// fakeClock is a clock the test moves.
type fakeClock struct{ off atomic.Int64 }

var clockStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (c *fakeClock) Now() time.Time      { return clockStart.Add(time.Duration(c.off.Load())) }
func (c *fakeClock) Add(d time.Duration) { c.off.Add(int64(d)) }

// TestSignInThrottled: wrong tokens from one address are answered 429 with
// a growing Retry-After; the right token after the wait signs in.
func TestSignInThrottled(t *testing.T) {
	t.Parallel()
	const token = "console-t0ken-for-tests"
	clock := &fakeClock{}
	base, _ := startConsole(t, console.Config{Addr: "0.0.0.0:" + fmt.Sprint(testenv.FreePort(t)), Token: secret.New(token), Now: clock.Now})
	c := newClient(t, base)
	wrong := url.Values{"operator": {"mallory"}, "token": {"wrong-token-wrong-token"}}
	right := url.Values{"operator": {"alice"}, "token": {token}}
	if code, _, _ := c.do(http.MethodPost, "/login", wrong); code != http.StatusUnauthorized {
		t.Fatalf("first wrong sign-in: %d, want 401", code)
	}
	var last int
	for i := range 5 {
		code, _, h := c.do(http.MethodPost, "/login", right)
		if code != http.StatusTooManyRequests {
			t.Fatalf("sign-in %d right after a wrong one: %d, want 429", i, code)
		}
		ra, _ := strconv.Atoi(h.Get("Retry-After"))
		if ra < 1 {
			t.Fatalf("Retry-After %q, want seconds", h.Get("Retry-After"))
		}
		clock.Add(time.Duration(ra) * time.Second)
		if code, _, _ := c.do(http.MethodPost, "/login", wrong); code != http.StatusUnauthorized {
			t.Fatalf("wrong sign-in after the wait: %d, want 401", code)
		}
		code, _, h = c.do(http.MethodPost, "/login", wrong)
		ra2, _ := strconv.Atoi(h.Get("Retry-After"))
		if code != http.StatusTooManyRequests || ra2 <= last {
			t.Fatalf("wrong sign-in %d: %d, Retry-After %d after %d, want 429 and a growing delay", i, code, ra2, last)
		}
		last = ra2
	}
	clock.Add(time.Duration(last) * time.Second)
	if code, _, _ := c.do(http.MethodPost, "/login", right); code != http.StatusSeeOther {
		t.Fatalf("right sign-in after the wait: %d, want 303", code)
	}
}

// TestSessionsBounded: the tokenless console gives every cookieless
// request the same session; signed-in sessions are capped, oldest out.
func TestSessionsBounded(t *testing.T) {
	t.Parallel()
	base, _ := startConsole(t, console.Config{})
	seen := map[string]bool{}
	for range 50 {
		_, _, h := newClient(t, base).do(http.MethodGet, "/dlq", nil)
		seen[h.Get("Set-Cookie")] = true
	}
	if len(seen) != 1 {
		t.Errorf("50 cookieless requests got %d sessions, want 1", len(seen))
	}

	const token = "console-t0ken-for-tests"
	tbase, _ := startConsole(t, console.Config{Addr: "0.0.0.0:" + fmt.Sprint(testenv.FreePort(t)), Token: secret.New(token)})
	first := newClient(t, tbase)
	right := url.Values{"operator": {"alice"}, "token": {token}}
	if code, _, _ := first.do(http.MethodPost, "/login", right); code != http.StatusSeeOther {
		t.Fatalf("sign in: %d", code)
	}
	if code, _, _ := first.do(http.MethodGet, "/dlq", nil); code != http.StatusOK {
		t.Fatalf("first session: GET /dlq %d, want 200", code)
	}
	for range console.MaxSessions {
		if code, _, _ := newClient(t, tbase).do(http.MethodPost, "/login", right); code != http.StatusSeeOther {
			t.Fatalf("sign in: %d", code)
		}
	}
	if code, _, _ := first.do(http.MethodGet, "/dlq", nil); code != http.StatusSeeOther {
		t.Errorf("oldest session after %d more sign-ins: GET /dlq %d, want 303 to /login", console.MaxSessions, code)
	}
}

// openLive opens a live stream; it returns the status and, when 200, a
// function closing it.
func (c *client) openLive(path string) (int, func()) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(c.t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	resp, err := c.http.Do(req)
	if err != nil {
		cancel()
		c.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return resp.StatusCode, nil
	}
	line := make([]byte, len(": live"))
	if _, err := io.ReadFull(resp.Body, line); err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	closeIt := func() { cancel(); resp.Body.Close() }
	c.t.Cleanup(closeIt)
	return resp.StatusCode, closeIt
}

// TestLiveStreamsCapped: a session opens at most MaxLiveStreamsPerSession
// live streams and all sessions MaxLiveStreams; beyond, 429.
func TestLiveStreamsCapped(t *testing.T) {
	t.Parallel()
	const token = "console-t0ken-for-tests"
	base, _ := startConsole(t, console.Config{Addr: "0.0.0.0:" + fmt.Sprint(testenv.FreePort(t)), Token: secret.New(token)})
	signIn := func() *client {
		c := newClient(t, base)
		if code, _, _ := c.do(http.MethodPost, "/login", url.Values{"operator": {"alice"}, "token": {token}}); code != http.StatusSeeOther {
			t.Fatalf("sign in: %d", code)
		}
		return c
	}
	c := signIn()
	var first func()
	for i := range console.MaxLiveStreamsPerSession {
		code, closeIt := c.openLive("/live/dlq")
		if code != http.StatusOK {
			t.Fatalf("live stream %d: %d, want 200", i, code)
		}
		if i == 0 {
			first = closeIt
		}
	}
	if code, _ := c.openLive("/live/dlq"); code != http.StatusTooManyRequests {
		t.Fatalf("live stream beyond the session's cap: %d, want 429", code)
	}
	first()
	testenv.WaitFor(t, 10*time.Second, "a closed stream to free its place", func() bool {
		code, _ := c.openLive("/live/dlq")
		return code == http.StatusOK
	})
	for open := console.MaxLiveStreamsPerSession; open < console.MaxLiveStreams; {
		o := signIn()
		for range min(console.MaxLiveStreamsPerSession, console.MaxLiveStreams-open) {
			if code, _ := o.openLive("/live/dlq"); code != http.StatusOK {
				t.Fatalf("live stream %d in all: %d, want 200", open, code)
			}
			open++
		}
	}
	if code, _ := signIn().openLive("/live/dlq"); code != http.StatusTooManyRequests {
		t.Fatalf("live stream beyond the total cap: %d, want 429", code)
	}
}
