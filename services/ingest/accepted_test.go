package ingest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/ingest"
)

// A webhook sent with curl's default -d content type
// (application/x-www-form-urlencoded) to a JSON route is answered with a
// message naming the content type and the one to send, and the log line
// names it too.
func TestWrongContentTypeIsNamed(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	b := bustest.Embedded(t)
	gw := startGateway(t, b, ingest.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, allProviders()...)
	gh := readFixture(t, "mappers", "github", "testdata", "payloads", "issues.opened.json")
	form := func(r *http.Request) *http.Request {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}
	slackEvent := readFixture(t, "mappers", "slack", "testdata", "events", "app_mention.json")
	for name, tc := range map[string]struct {
		req  *http.Request
		want []string
	}{
		"github form without payload=": {form(githubRequest(t, gw.url, "issues", "ct-1", gh)),
			[]string{`Content-Type "application/x-www-form-urlencoded" is not application/json`, "Content-Type: application/json"}},
		"github text/plain": {func() *http.Request {
			r := githubRequest(t, gw.url, "issues", "ct-2", []byte("hello"))
			r.Header.Set("Content-Type", "text/plain")
			return r
		}(), []string{`Content-Type "text/plain" is not application/json`}},
		"sentry form":      {form(sentryRequest(gw.url, []byte("a=b"), true)), []string{`"application/x-www-form-urlencoded" is not application/json`}},
		"openproject form": {form(openProjectRequest(gw.url, []byte("a=b"), true)), []string{`"application/x-www-form-urlencoded" is not application/json`}},
		"slack events form": {slackRequest(gw.url, "events", "application/x-www-form-urlencoded", []byte("a=b"), true),
			[]string{`"application/x-www-form-urlencoded" is not application/json`}},
		"slack command as JSON": {slackRequest(gw.url, "commands", "application/json", slackEvent, true),
			[]string{`"application/json" is not application/x-www-form-urlencoded`}},
	} {
		status, body := do(t, tc.req)
		if status != http.StatusBadRequest {
			t.Errorf("%s: got %d, want 400", name, status)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: answer %q does not name %q", name, body, w)
			}
		}
	}
	// A JSON body that does not parse as JSON keeps the plain answer.
	status, body := do(t, githubRequest(t, gw.url, "issues", "ct-3", []byte("not json")))
	if status != http.StatusBadRequest || strings.TrimSpace(body) != "cannot parse payload" {
		t.Errorf("JSON route, bad JSON: got %d %q, want 400 \"cannot parse payload\"", status, body)
	}
	if !strings.Contains(logs.String(), `Content-Type \"application/x-www-form-urlencoded\"`) {
		t.Errorf("no log line names the content type:\n%s", logs.String())
	}
}

// Each accepted webhook writes one info line naming provider, event,
// delivery and thread; past LogPerSecond in one second the others are left
// out and summed up in one "suppressed" line.
func TestAcceptedWebhookLogged(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	b := bustest.Embedded(t)
	const per = 3
	gw := startGateway(t, b, ingest.Config{LogPerSecond: per, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, allProviders()...)
	body := readFixture(t, "mappers", "github", "testdata", "payloads", "issues.opened.json")
	start := time.Now()
	const n = 12
	for i := range n {
		if status, _ := do(t, githubRequest(t, gw.url, "issues", fmt.Sprintf("acc-%d", i), body)); status != http.StatusOK {
			t.Fatalf("webhook %d: got %d, want 200", i, status)
		}
	}
	seconds := int(time.Since(start)/time.Second) + 1 // the webhooks may straddle a second boundary
	var accepted, suppressed int
	testenv.Poll(t, 10*time.Second, func() (bool, string) {
		accepted, suppressed = 0, 0
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var l struct {
				Level, Msg, Provider, Event, Delivery, Thread string
				Suppressed                                    int
			}
			if json.Unmarshal([]byte(line), &l) != nil {
				continue
			}
			switch l.Msg {
			case "webhook accepted":
				accepted++
				if l.Level != "INFO" || l.Provider != "github" || l.Event != "issues" || !strings.HasPrefix(l.Delivery, "acc-") || !strings.HasPrefix(l.Thread, "github:") {
					t.Errorf("accepted line %s: want level INFO, provider github, event issues, delivery acc-*, thread github:*", line)
				}
			case "webhook accepted lines suppressed":
				suppressed += l.Suppressed
			}
		}
		return accepted+suppressed == n, fmt.Sprintf("%d accepted lines + %d suppressed, want %d", accepted, suppressed, n)
	})
	if accepted < per || accepted > per*(seconds+1) {
		t.Errorf("%d accepted lines for %d webhooks in %d second(s), want %d per second", accepted, n, seconds, per)
	}
}

// BenchmarkAcceptedLog is the webhook path (signed request over loopback
// HTTP, verify, map, publish to an embedded JetStream, 200) without the
// accepted line (LogPerSecond -1) and with it (the default: at most
// DefaultLogPerSecond lines a second, JSON to a discarding writer), in one
// run:
//
//	go test ./services/ingest -run '^$' -bench AcceptedLog -benchtime 3000x -count 3
func BenchmarkAcceptedLog(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			cfg := ingest.Config{Limits: map[string]ingest.Limits{"github": {Deadline: time.Minute}},
				Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), LogPerSecond: -1}
			if mode == "on" {
				cfg.LogPerSecond = 0
			}
			addr := serveGateway(b, cfg)
			validLatencies(b, addr, 50) // warm up
			b.ReportAllocs()
			b.ResetTimer()
			lat := validLatencies(b, addr, b.N)
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
		})
	}
}
