package ingest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/services/ingest"
)

// serveGateway runs a GitHub gateway on an embedded bus over loopback HTTP
// until the test or benchmark ends, and returns its address.
func serveGateway(t testing.TB, cfg ingest.Config, opts ...bustest.Option) string {
	t.Helper()
	b := bustest.Embedded(t, opts...)
	svc, err := ingest.New(cfg, b, githubProvider())
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserver.New(nil, prometheus.NewRegistry())
	svc.Mount(srv.Echo)
	ln := testenv.Listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// hostile opens n connections that send a webhook's headers and then
// nothing. They declare lengths that fill an in-flight budget reserving
// declared lengths to the last few bytes (GitHub's whole 25 MiB limit, then
// 1 MiB, 64 KiB, 4 KiB), or send no length at all (chunked). They stay open until the test ends (or the server cuts
// them off); the returned connections let a test read what the server said.
func hostile(t testing.TB, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("hostile connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		length := "Transfer-Encoding: chunked\r\n"
		if sizes := []int{25 << 20, 1 << 20, 64 << 10, 4 << 10}; i%5 < len(sizes) {
			length = fmt.Sprintf("Content-Length: %d\r\n", sizes[i%5])
		}
		req := "POST /webhooks/github HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n" +
			"X-GitHub-Event: issues\r\nX-GitHub-Delivery: hostile-" + fmt.Sprint(i) + "\r\n" + length + "\r\n"
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return conns
}

// validLatencies posts n signed webhooks one after another and returns each
// one's latency; every one must be answered 200.
func validLatencies(t testing.TB, addr string, n int) []time.Duration {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	// About the size of a GitHub issues webhook.
	body := []byte(`{"zen":"Keep it logically awesome.","hook_id":42,"pad":"` + strings.Repeat("x", 12<<10) + `"}`)
	out := make([]time.Duration, 0, n)
	for i := range n {
		req := githubRequest(t, "http://"+addr, "ping", fmt.Sprintf("valid-%d-%d", time.Now().UnixNano(), i), body)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("valid webhook %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out = append(out, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("valid webhook %d with hostile connections open: got %d, want 200", i, resp.StatusCode)
		}
	}
	return out
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// Hundreds of connections that send headers and no body neither block valid
// webhooks (their memory is reserved as bytes arrive, not as declared) nor
// stay open past the provider's deadline (408).
func TestIdleConnectionsDoNotStarveWebhooks(t *testing.T) {
	t.Parallel()
	const deadline = 2 * time.Second
	addr := serveGateway(t, ingest.Config{Limits: map[string]ingest.Limits{"github": {Deadline: deadline}}})
	conns := hostile(t, addr, 300)
	lat := validLatencies(t, addr, 200)
	t.Logf("300 idle connections open: valid webhooks p50 %s, p99 %s, max %s",
		percentile(lat, 0.5), percentile(lat, 0.99), slices.Max(lat))

	// Each idle connection is answered 408 once its deadline passed.
	for i, c := range conns[:10] {
		_ = c.SetReadDeadline(time.Now().Add(3 * deadline))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("idle connection %d: got %v, want a 408 answer", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("idle connection %d: got %d, want 408", i, resp.StatusCode)
		}
	}
}

// Memory is reserved as the body arrives: a request declaring 25 MiB against
// a 64 KiB budget is read (and answered 408 when it stalls at its deadline),
// and only a body that actually outgrows the budget gets 503.
func TestBodyReservedAsItArrives(t *testing.T) {
	t.Parallel()
	addr := serveGateway(t, ingest.Config{
		MaxInflightBytes: 64 << 10,
		Limits:           map[string]ingest.Limits{"github": {Deadline: time.Second}},
	})
	for name, tc := range map[string]struct {
		sent int
		want int
	}{
		"stalls after 10 KiB":     {10 << 10, http.StatusRequestTimeout},
		"sends 256 KiB of 25 MiB": {256 << 10, http.StatusServiceUnavailable},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := "POST /webhooks/github HTTP/1.1\r\nHost: relay\r\nX-GitHub-Event: issues\r\nContent-Length: 26214400\r\n\r\n"
			go func() {
				_, _ = io.WriteString(c, req)
				_, _ = io.WriteString(c, strings.Repeat("x", tc.sent))
			}()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("got %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	// Valid webhooks still pass: the refused requests gave their memory back.
	validLatencies(t, addr, 5)
}

// BenchmarkValidWebhookWithIdleConns measures valid-webhook latency (p50,
// p99) while N hostile connections that sent headers and no body are open.
//
//	go test ./services/ingest -run '^$' -bench ValidWebhookWithIdleConns -benchtime 2000x
func BenchmarkValidWebhookWithIdleConns(b *testing.B) {
	for _, n := range []int{0, 100, 500, 1000} {
		b.Run(fmt.Sprintf("idle=%d", n), func(b *testing.B) {
			addr := serveGateway(b, ingest.Config{Limits: map[string]ingest.Limits{"github": {Deadline: time.Minute}}})
			hostile(b, addr, n)
			validLatencies(b, addr, 50) // warm up
			b.ResetTimer()
			lat := validLatencies(b, addr, b.N)
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
		})
	}
}

// withField returns the JSON fixture with the field at path set to v.
func withField(t *testing.T, body []byte, v any, path ...string) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	m := doc
	for _, k := range path[:len(path)-1] {
		m = m[k].(map[string]any)
	}
	m[path[len(path)-1]] = v
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Signed requests whose subject tokens come out long (a 4 KiB
// Sentry-Hook-Resource header, a long Slack event.type, a long OpenProject
// action) used to make a subject over NATS's control-line limit: the server
// closed the connection, nats.go never reconnected, and every webhook after
// them got 503. Now none of them reaches the bus with such a subject, and
// the bus stays up.
func TestLongTokensKeepTheBusUp(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	gw := startGateway(t, b, ingest.Config{}, allProviders()...)
	long := strings.Repeat("x", 4096)
	sentryReq := sentryRequest(gw.url, readFixture(t, "mappers", "sentry", "testdata", "payloads", "issue.created.json"), true)
	sentryReq.Header.Set(sentry.HeaderResource, long)
	slackBody := withField(t, readFixture(t, "mappers", "slack", "testdata", "events", "app_mention.json"), long, "event", "type")
	opBody := withField(t, readFixture(t, "mappers", "openproject", "testdata", "payloads", "work_package.created.json"), long, "action")
	for name, req := range map[string]*http.Request{
		"sentry 4 KiB resource header": sentryReq,
		"slack 4 KiB event type":       slackRequest(gw.url, "events", "application/json", slackBody, true),
		"openproject 4 KiB action":     openProjectRequest(gw.url, opBody, true),
	} {
		code, body := do(t, req)
		if code >= 500 {
			t.Errorf("%s: got %d %q, want the request handled (2xx or 4xx)", name, code, body)
		}
		if err := b.Ready(t.Context()); err != nil {
			t.Fatalf("after %s: bus not ready: %v", name, err)
		}
	}
	code, body := do(t, githubRequest(t, gw.url, "ping", "after-long-tokens", []byte(`{"zen":"z","hook_id":1}`)))
	if code != http.StatusOK {
		t.Errorf("valid webhook after the long tokens: got %d %q, want 200", code, body)
	}
	if err := b.Alive(); err != nil {
		t.Errorf("bus connection lost: %v", err)
	}
}

// A credential someone pasted into an issue (its body and its title) is
// replaced before the envelope is stored: it reaches neither the bus nor the
// log, which says how many were replaced. The prose around it, and a word
// like "token" in it, stay as written.
func TestCredentialsInWebhookTextAreReplaced(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	var logs testenv.Buffer
	gw := startGateway(t, b, ingest.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, githubProvider())
	pat := "ghp_" + strings.Repeat("A1b2", 9)
	aws := "AKIAIOSFODNN7EXAMPLE"
	body := readFixture(t, "mappers", "github", "testdata", "payloads", "issues.opened.json")
	body = withField(t, body, "CI fails: the token "+pat+" expired, key "+aws, "issue", "body")
	body = withField(t, body, "Leaked "+pat, "issue", "title")
	if code, answer := do(t, githubRequest(t, gw.url, "issues", "leak-1", body)); code != http.StatusOK {
		t.Fatalf("got %d %q, want 200", code, answer)
	}
	got := collect(t, b, 1, 10*time.Second)["leak-1"]
	if len(got) != 1 {
		t.Fatalf("got %d envelopes for the delivery, want 1", len(got))
	}
	stored := string(got[0].Data)
	for _, c := range []string{pat, aws} {
		if strings.Contains(stored, c) {
			t.Errorf("the stored envelope holds %q: %s", c, stored)
		}
		if strings.Contains(logs.String(), c) {
			t.Errorf("the log holds %q", c)
		}
	}
	e := got[0].Envelope
	if want := "CI fails: the token [REDACTED] expired, key [REDACTED]"; !strings.Contains(e.Content, want) {
		t.Errorf("content %q, want it to hold %q", e.Content, want)
	}
	facts, _ := e.Meta.Extra["facts"].(map[string]any)
	if facts["title"] != "Leaked [REDACTED]" {
		t.Errorf("title fact %v, want %q", facts["title"], "Leaked [REDACTED]")
	}
	if !strings.Contains(logs.String(), `"credentials":4`) {
		t.Errorf("the log does not count the 4 credentials replaced (title twice: fact and content): %s", logs.String())
	}
}
