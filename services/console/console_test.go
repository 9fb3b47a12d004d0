package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/console"
)

// client is a browser without JavaScript: a cookie jar, no redirects
// followed unless asked.
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func newClient(t *testing.T, base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: base, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(method, path string, form url.Values) (int, string, http.Header) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequestWithContext(c.t.Context(), method, c.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if method != http.MethodGet && method != http.MethodHead {
		req.Header.Set("Origin", c.base) // as a browser does for a form on the page
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf reads the CSRF token from a page.
func (c *client) csrf(path string) string {
	c.t.Helper()
	code, body, _ := c.do(http.MethodGet, path, nil)
	m := csrfRE.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		c.t.Fatalf("GET %s: %d, no CSRF token in the page", path, code)
	}
	return m[1]
}

// startConsole runs a console on an embedded bus and returns its base URL.
func startConsole(t *testing.T, cfg console.Config) (string, *bus.Bus) {
	t.Helper()
	b := bustest.Embedded(t)
	if cfg.Addr == "" {
		cfg.Addr = testenv.FreeAddr(t)
	}
	svc, err := console.New(cfg, b)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	testenv.Go(t, "console", svc.Run)
	base := "http://" + strings.Replace(cfg.Addr, "0.0.0.0", "127.0.0.1", 1)
	testenv.WaitFor(t, 10*time.Second, "the console to listen", func() bool {
		resp, err := http.Get(base + "/static/console.css")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	return base, b
}

func TestSettingsRequireTokenOffLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env     map[string]string
		wantErr string
	}{
		{map[string]string{}, ""},
		{map[string]string{"RELAY_CONSOLE_ADDR": "[::1]:9000"}, ""},
		{map[string]string{"RELAY_CONSOLE_ADDR": "0.0.0.0:8081"}, "RELAY_CONSOLE_TOKEN"},
		{map[string]string{"RELAY_CONSOLE_ADDR": ":8081"}, "RELAY_CONSOLE_TOKEN"},
		{map[string]string{"RELAY_CONSOLE_ADDR": "0.0.0.0:8081", "RELAY_CONSOLE_TOKEN": "t0ken-long-enough-1"}, ""},
		{map[string]string{"RELAY_CONSOLE_ADDR": "0.0.0.0:8081", "RELAY_CONSOLE_TOKEN": "t0ken"}, "RELAY_CONSOLE_TOKEN"},
		{map[string]string{"RELAY_CONSOLE_TOKEN": "x"}, "RELAY_CONSOLE_TOKEN"},
		{map[string]string{"RELAY_CONSOLE_ADDR": "nope"}, "RELAY_CONSOLE_ADDR"},
		{map[string]string{"RELAY_CONSOLE_RECENT": "5"}, "RELAY_CONSOLE_RECENT"},
		{map[string]string{"RELAY_CONSOLE_IDLE": "10ms"}, "RELAY_CONSOLE_IDLE"},
		{map[string]string{"RELAY_CONSOLE_IDLE": "forever"}, "RELAY_CONSOLE_IDLE"},
		{map[string]string{"RELAY_CONSOLE_IDLE": "30s"}, ""},
	}
	for _, tt := range tests {
		env := config.FromMap(tt.env)
		s := console.ReadSettings(env)
		err := env.Err()
		if (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ReadSettings(%v): got %v, want an error naming %q", tt.env, err, tt.wantErr)
		}
		if tt.wantErr == "" && (s.Config.Addr == "" || s.Config.Recent != 2000) {
			t.Errorf("ReadSettings(%v): got address %q and %d recent envelopes, want an address and 2000", tt.env, s.Config.Addr, s.Config.Recent)
		}
		wantIdle := console.DefaultIdle
		if v, ok := tt.env["RELAY_CONSOLE_IDLE"]; ok {
			wantIdle, _ = time.ParseDuration(v)
		}
		if tt.wantErr == "" && s.Config.Idle != wantIdle {
			t.Errorf("ReadSettings(%v): got idle %v, want %v", tt.env, s.Config.Idle, wantIdle)
		}
	}
	if _, err := console.New(console.Config{Addr: "0.0.0.0:8081"}, nil); !errors.Is(err, console.ErrNoToken) {
		t.Errorf("New off loopback without token: got %v, want ErrNoToken", err)
	}
}

func TestTokenSignInAndCSRF(t *testing.T) {
	t.Parallel()
	const token = "console-t0ken-for-tests"
	addr := "0.0.0.0:" + fmt.Sprint(testenv.FreePort(t))
	clock := &fakeClock{}
	base, _ := startConsole(t, console.Config{Addr: addr, Token: secret.New(token), Now: clock.Now})
	c := newClient(t, base)
	if code, _, h := c.do(http.MethodGet, "/approvals", nil); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/login") {
		t.Fatalf("GET /approvals signed out: %d to %q, want 303 to /login", code, h.Get("Location"))
	}
	if code, _, _ := c.do(http.MethodGet, "/live/events", nil); code != http.StatusUnauthorized {
		t.Fatalf("GET /live/events signed out: %d, want 401", code)
	}
	if code, _, _ := c.do(http.MethodPost, "/dlq/replay-all", url.Values{"csrf": {"x"}}); code != http.StatusUnauthorized {
		t.Fatalf("POST signed out: %d, want 401", code)
	}
	if code, _, _ := c.do(http.MethodPost, "/login", url.Values{"operator": {"alice"}, "token": {"wrong"}}); code != http.StatusUnauthorized {
		t.Fatalf("sign in with a wrong token: %d, want 401", code)
	}
	clock.Add(time.Second) // the throttle's first delay
	code, _, h := c.do(http.MethodPost, "/login", url.Values{"operator": {"alice"}, "token": {token}, "next": {"/dlq"}})
	if code != http.StatusSeeOther || h.Get("Location") != "/dlq" {
		t.Fatalf("sign in: %d to %q, want 303 to /dlq", code, h.Get("Location"))
	}
	cookie := h.Get("Set-Cookie")
	for _, want := range []string{console.CookieName + "=", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(cookie, want) {
			t.Errorf("Set-Cookie %q, want %s", cookie, want)
		}
	}
	csrf := c.csrf("/dlq")
	wrong := strings.Map(func(r rune) rune { return map[bool]rune{true: 'a', false: '0'}[r == '0'] }, csrf[:1]) + csrf[1:]
	for name, form := range map[string]url.Values{"no token": {}, "wrong token": {"csrf": {wrong}}} {
		if code, _, _ := c.do(http.MethodPost, "/dlq/replay-all", form); code != http.StatusForbidden {
			t.Errorf("POST with %s: %d, want 403", name, code)
		}
	}
	if code, _, h := c.do(http.MethodPost, "/dlq/replay-all", url.Values{"csrf": {csrf}, "back": {"/dlq"}}); code != http.StatusSeeOther || !strings.Contains(h.Get("Location"), "notice=0+dead+letter") {
		t.Errorf("POST with the CSRF token: %d to %q, want 303 with a notice", code, h.Get("Location"))
	}
	other := newClient(t, base) // another browser, not signed in, with a stolen CSRF token
	if code, _, _ := other.do(http.MethodPost, "/dlq/replay-all", url.Values{"csrf": {csrf}}); code != http.StatusUnauthorized {
		t.Errorf("POST from another browser: %d, want 401", code)
	}
}

func TestLoopbackPagesAndDeadLetters(t *testing.T) {
	t.Parallel()
	base, b := startConsole(t, console.Config{})
	c := newClient(t, base)
	// A dead letter: a handler that gives up on the first delivery.
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "a webhook nobody can handle")
	e.Meta.Thread = "github:acme/widgets#9"
	e.Meta.TaskID = "task-9"
	e.Meta.Source = &envelope.Source{Event: "issues", DeliveryID: "delivery-9", Actor: "octocat"}
	if _, err := b.Publish(t.Context(), "in.github.issues", e); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		_ = b.Consume(ctx, bus.ConsumerConfig{Name: "failing", Subject: "in.github.issues"}, bus.HandlerFunc(func(context.Context, *bus.Message) error {
			return bus.Permanent(errors.New("cannot handle this"))
		}))
	}()
	var seq uint64
	testenv.WaitFor(t, 10*time.Second, "the dead letter", func() bool {
		dls, err := b.DeadLetters(t.Context(), 0)
		if err == nil && len(dls) == 1 {
			seq = dls[0].Seq
		}
		return seq != 0
	})
	for path, want := range map[string]string{
		"/":                                     "Pending approvals",
		"/events?channel=github&actor=octo":     "a webhook nobody can handle",
		"/events/" + e.ID:                       "delivery-9",
		"/story?id=delivery-9":                  "hop-inbound",
		"/dlq":                                  "cannot handle this",
		fmt.Sprintf("/dlq/%d", seq):             "cannot handle this",
		"/tools":                                "Hook executions",
		"/approvals":                            "<h2 id=\"h-pending\">",
		"/events?channel=slack":                 "No envelope yet",
		"/story?id=github%3Aacme%2Fwidgets%239": "task-9",
	} {
		code, body, _ := c.do(http.MethodGet, path, nil)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q; body:\n%s", path, code, want, body)
		}
	}
	if _, body, _ := c.do(http.MethodGet, "/", nil); !strings.Contains(body, "Dead letters per minute: 1 in the last hour") ||
		!strings.Contains(body, "Webhooks per minute: 1 in the last hour") {
		t.Errorf("the overview's charts do not count the webhook and its dead letter:\n%s", body)
	}
	csrf := c.csrf("/dlq")
	if code, _, _ := c.do(http.MethodPost, fmt.Sprintf("/dlq/%d/delete", seq), url.Values{"csrf": {csrf}}); code != http.StatusSeeOther {
		t.Fatalf("delete: %d, want 303", code)
	}
	if dls, err := b.DeadLetters(t.Context(), 0); err != nil || len(dls) != 0 {
		t.Fatalf("after delete: %d dead letters (%v), want 0", len(dls), err)
	}
}

// TestConsoleFollowsTheBusOnlyWhileLookedAt: the console subscribes to the
// bus only when a page asks for the envelopes it holds, and that first page
// shows what was published before; while it follows, an envelope published
// just before a request is on the page; a live page keeps it following, and
// after the quiet period that follows the subscriptions are gone; the next
// page shows everything again.
func TestConsoleFollowsTheBusOnlyWhileLookedAt(t *testing.T) {
	t.Parallel()
	base, b := startConsole(t, console.Config{Idle: 300 * time.Millisecond})
	c := newClient(t, base)
	publish := func(text string) string {
		t.Helper()
		e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, text)
		if _, err := b.Publish(t.Context(), "in.github.issues", e); err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	page := func(path string, want ...string) {
		t.Helper()
		code, body, _ := c.do(http.MethodGet, path, nil)
		for _, w := range want {
			if code != http.StatusOK || !strings.Contains(body, w) {
				t.Fatalf("GET %s: %d, want 200 with %q; body:\n%s", path, code, w, body)
			}
		}
	}
	first := publish("published before anyone looked")
	idle := b.Conn().NumSubscriptions()
	page("/dlq", "Dead letters") // a page without the bus's envelopes
	if n := b.Conn().NumSubscriptions(); n != idle {
		t.Fatalf("after /dlq: %d subscriptions, want %d", n, idle)
	}
	page("/events", first)
	if n, want := b.Conn().NumSubscriptions(), idle+1+len(bus.WorkRoots()); n != want {
		t.Fatalf("following: %d subscriptions, want %d", n, want)
	}
	second := publish("published while the console follows")
	page("/events/"+second, second)

	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/live/events", nil)
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len(": live"))
	if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != ": live" {
		t.Fatalf("live page: read %q (%v), want %q", line, err, ": live")
	}
	cancel()
	resp.Body.Close()
	testenv.WaitFor(t, 10*time.Second, "the subscriptions to go after the quiet period", func() bool {
		return b.Conn().NumSubscriptions() == idle
	})

	third := publish("published while nobody looked")
	page("/events", first, second, third)
}

// The overview draws the inbound stream's webhooks per minute as SVG.
func TestOverviewChart(t *testing.T) {
	t.Parallel()
	base, b := startConsole(t, console.Config{})
	for i := range 3 {
		e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, fmt.Sprintf("webhook %d", i))
		if _, err := b.Publish(t.Context(), "in.github.issues", e); err != nil {
			t.Fatal(err)
		}
	}
	code, body, _ := newClient(t, base).do(http.MethodGet, "/", nil)
	if code != http.StatusOK {
		t.Fatalf("overview: %d", code)
	}
	for _, want := range []string{`id="chart-webhooks"`, `<svg class="chart"`, "Webhooks per minute: 3 in the last hour"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
}
