package ingest_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/ingest"
)

const ghSecret = "gh-test-secret"

// gateway is a running gateway on the shared echo server over loopback HTTP.
type gateway struct {
	url string
	reg *prometheus.Registry
	svc *ingest.Service
}

// startGateway serves the gateway for providers on 127.0.0.1 with a random
// port until the test ends.
func startGateway(t *testing.T, pub ingest.Publisher, cfg ingest.Config, providers ...mappers.Provider) *gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	svc, err := ingest.New(cfg, pub, providers...)
	if err != nil {
		t.Fatalf("ingest.New: %v", err)
	}
	srv := httpserver.New(nil, reg)
	svc.Mount(srv.Echo)
	ln := testenv.Listen(t)
	testenv.Go(t, "Run", svc.Run)
	testenv.Go(t, "http server", func(ctx context.Context) error { return srv.ServeListener(ctx, ln) })
	return &gateway{url: "http://" + ln.Addr().String(), reg: reg, svc: svc}
}

func githubProvider() *github.Provider {
	return github.New(github.Config{Secret: secret.New(ghSecret)})
}

// githubRequest builds a signed GitHub webhook request.
func githubRequest(t testing.TB, base, event, delivery string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/webhooks/github", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/test")
	github.SetHeaders(req.Header, event, delivery, "42", github.Sign([]byte(ghSecret), body))
	return req
}

func do(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// collect consumes relay.in.github.> with a durable consumer through the bus
// (so every envelope is schema-checked on the way) until want envelopes
// arrived or the deadline passed. It returns them by delivery id.
func collect(t *testing.T, b *bus.Bus, want int, wait time.Duration) map[string][]*bus.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	got := map[string][]*bus.Message{}
	n := 0
	all := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.Consume(ctx, bus.ConsumerConfig{Name: "test-" + uuid.NewString()[:8], Subject: "in.github.>", Concurrency: 4},
			bus.HandlerFunc(func(_ context.Context, m *bus.Message) error {
				cp := *m
				cp.Data = bytes.Clone(m.Data)
				mu.Lock()
				defer mu.Unlock()
				id := m.Envelope.Meta.Source.DeliveryID
				got[id] = append(got[id], &cp)
				n++
				if n == want {
					close(all)
				}
				return nil
			}))
	}()
	select {
	case <-all:
	case <-time.After(wait):
		t.Errorf("consumed %d envelopes in %s, want %d", n, wait, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}

// storedIn reports how many messages the inbound stream holds.
func storedIn(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), b.StreamName("in.x"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestOctokitExamplesOverHTTP signs and posts every @octokit/webhooks-examples
// payload to the running gateway and consumes exactly one schema-valid
// envelope per webhook on relay.in.github.{event}, in the right thread.
func TestOctokitExamplesOverHTTP(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	gw := startGateway(t, b, ingest.Config{}, githubProvider())
	exs := mapperstest.OctokitExamples(t)
	if len(exs) < 300 {
		t.Fatalf("got %d examples, want the whole api.github.com set", len(exs))
	}
	deliveries := make([]string, len(exs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				code, body := do(t, githubRequest(t, gw.url, exs[i].Event, deliveries[i], exs[i].Payload))
				if code != http.StatusOK {
					t.Errorf("example %d (%s): got %d %q, want 200", i, exs[i].Event, code, body)
				}
			}
		})
	}
	for i := range exs {
		deliveries[i] = uuid.NewString()
	}
	for i := range exs {
		work <- i
	}
	close(work)
	wg.Wait()

	got := collect(t, b, len(exs), 30*time.Second)
	for i, ex := range exs {
		msgs := got[deliveries[i]]
		if len(msgs) != 1 {
			t.Errorf("example %d (%s): got %d envelopes, want exactly 1", i, ex.Event, len(msgs))
			continue
		}
		m := msgs[0]
		if want := "in.github." + ex.Event; m.Subject != want {
			t.Errorf("example %d: subject %q, want %q", i, m.Subject, want)
		}
		if err := envelope.ValidateJSON(m.Data); err != nil {
			t.Errorf("example %d (%s): %v", i, ex.Event, err)
		}
		if th, want := m.Envelope.Meta.Thread, threadOf(t, ex); th != want {
			t.Errorf("example %d (%s): thread %q, want %q", i, ex.Event, th, want)
		}
		if id, want := m.Header.Get(jetstream.MsgIDHeader), "github:42:"+deliveries[i]; id != want {
			t.Errorf("example %d: Nats-Msg-Id %q, want %q", i, id, want)
		}
	}
	if n := storedIn(t, b); n != uint64(len(exs)) {
		t.Errorf("inbound stream holds %d messages, want %d", n, len(exs))
	}
	if v := counterSum(t, gw.reg, "relay_ingest_requests_total", "provider", "github", "status", "200"); v != float64(len(exs)) {
		t.Errorf("relay_ingest_requests_total{github,200} = %v, want %d", v, len(exs))
	}
}

// counterSum adds the counter name over every series whose labels include
// the given name, value pairs.
func counterSum(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			has := map[string]string{}
			for _, l := range m.GetLabel() {
				has[l.GetName()] = l.GetValue()
			}
			match := true
			for i := 0; i+1 < len(labels); i += 2 {
				match = match && has[labels[i]] == labels[i+1]
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func sha1Sig(body []byte) string {
	mac := hmac.New(sha1.New, []byte(ghSecret))
	mac.Write(body)
	return "sha1=" + hex.EncodeToString(mac.Sum(nil))
}

// TestStatusCodes posts over real HTTP to a gateway on a real JetStream and
// checks each answer and what the inbound stream holds afterwards.
func TestStatusCodes(t *testing.T) {
	t.Parallel()
	for _, c := range statusCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

// statusCase is one request (or a redelivery of it) to the GitHub route and
// the status and number of stored envelopes it should give.
type statusCase struct {
	name       string
	req        func(t *testing.T, base string) *http.Request
	twice      bool // send the same request twice (a redelivery)
	wantStatus int
	wantStored uint64
}

func statusCases() []statusCase {
	issue := []byte(`{"action":"opened","issue":{"number":1,"title":"t"},"repository":{"full_name":"o/r"},"sender":{"login":"a"}}`)
	big := []byte(`{"action":"opened","issue":{"number":1,"body":"` + strings.Repeat("x", 70<<10) + `"},"repository":{"full_name":"o/r"}}`)
	return []statusCase{
		{"signed issue", func(t *testing.T, u string) *http.Request { return githubRequest(t, u, "issues", "d1", issue) }, false, 200, 1},
		{"redelivery stores one", func(t *testing.T, u string) *http.Request { return githubRequest(t, u, "issues", "d1", issue) }, true, 200, 1},
		{"ping is 200", func(t *testing.T, u string) *http.Request {
			return githubRequest(t, u, "ping", "d2", []byte(`{"zen":"z","hook_id":42,"repository":{"full_name":"o/r"}}`))
		}, false, 200, 1},
		{"wrong signature", func(t *testing.T, u string) *http.Request {
			r := githubRequest(t, u, "issues", "d3", issue)
			r.Header.Set(github.HeaderSignature256, github.Sign([]byte("other"), issue))
			return r
		}, false, 401, 0},
		{"missing signature", func(t *testing.T, u string) *http.Request {
			r := githubRequest(t, u, "issues", "d4", issue)
			r.Header.Del(github.HeaderSignature256)
			return r
		}, false, 401, 0},
		{"SHA-1 only is refused", func(t *testing.T, u string) *http.Request {
			r := githubRequest(t, u, "issues", "d5", issue)
			r.Header.Del(github.HeaderSignature256)
			r.Header.Set(github.HeaderSignatureSHA1, sha1Sig(issue))
			return r
		}, false, 401, 0},
		{"body changed after signing", func(t *testing.T, u string) *http.Request {
			r := githubRequest(t, u, "issues", "d6", issue)
			r.Body = io.NopCloser(bytes.NewReader(bytes.Replace(issue, []byte(`"t"`), []byte(`"T"`), 1)))
			return r
		}, false, 401, 0},
		{"unparsable body", func(t *testing.T, u string) *http.Request {
			return githubRequest(t, u, "issues", "d7", []byte(`{"action":`))
		}, false, 400, 0},
		{"no event header", func(t *testing.T, u string) *http.Request {
			r := githubRequest(t, u, "issues", "d8", issue)
			r.Header.Del(github.HeaderEvent)
			return r
		}, false, 400, 0},
		{"over the limit", func(t *testing.T, u string) *http.Request { return githubRequest(t, u, "issues", "d9", big) }, false, 413, 0},
		{"over the limit, chunked", func(t *testing.T, u string) *http.Request {
			r := githubRequest(t, u, "issues", "d10", big)
			r.Body = io.NopCloser(bytes.NewReader(big)) // hides the length
			r.ContentLength = -1
			return r
		}, false, 413, 0},
		{"GET", func(t *testing.T, u string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, u+"/webhooks/github", nil)
			return r
		}, false, 405, 0},
		{"PUT signed", func(t *testing.T, u string) *http.Request {
			r := githubRequest(t, u, "issues", "d11", issue)
			r.Method = http.MethodPut
			return r
		}, false, 405, 0},
	}
}

// run sends the case's request to a fresh gateway and checks the answers,
// the stored envelopes and the metrics.
func (c statusCase) run(t *testing.T) {
	b := bustest.Embedded(t)
	gw := startGateway(t, b, ingest.Config{Limits: map[string]ingest.Limits{"github": {MaxBody: 64 << 10}}}, githubProvider())
	n := 1
	if c.twice {
		n = 2
	}
	for i := range n {
		resp, err := http.DefaultClient.Do(c.req(t, gw.url))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.wantStatus {
			t.Errorf("request %d: got %d %q, want %d", i+1, resp.StatusCode, body, c.wantStatus)
		}
		if got := resp.Header.Get("Allow"); c.wantStatus == 405 && got != "POST" {
			t.Errorf("got Allow %q, want POST", got)
		}
	}
	if got := storedIn(t, b); got != c.wantStored {
		t.Errorf("inbound stream holds %d messages, want %d", got, c.wantStored)
	}
	if c.wantStored > 0 {
		got := collect(t, b, int(c.wantStored), 10*time.Second)
		if len(got) != int(c.wantStored) {
			t.Errorf("consumed envelopes of %d deliveries, want %d", len(got), c.wantStored)
		}
	}
	if c.twice {
		if v := counterSum(t, gw.reg, "relay_ingest_envelopes_total", "result", "duplicate"); v != 1 {
			t.Errorf("relay_ingest_envelopes_total{result=duplicate} = %v, want 1", v)
		}
	}
	if v := counterSum(t, gw.reg, "relay_ingest_requests_total", "provider", "github", "status", fmt.Sprint(c.wantStatus)); v != float64(n) {
		t.Errorf("relay_ingest_requests_total{github,%d} = %v, want %d", c.wantStatus, v, n)
	}
}

// TestNoSecretRefused: a provider without a secret is routed but refuses
// every request, even one signed with the empty key.
func TestNoSecretRefused(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	gw := startGateway(t, b, ingest.Config{}, github.New(github.Config{}))
	body := []byte(`{"zen":"z"}`)
	req := githubRequest(t, gw.url, "ping", "d", body)
	req.Header.Set(github.HeaderSignature256, github.Sign(nil, body))
	if code, msg := do(t, req); code != http.StatusUnauthorized {
		t.Errorf("got %d %q, want 401", code, msg)
	}
	if n := storedIn(t, b); n != 0 {
		t.Errorf("inbound stream holds %d messages, want 0", n)
	}
}

// TestInflightBudget: a body that does not fit the in-flight memory budget is
// answered 503 at once, before it is read.
func TestInflightBudget(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	gw := startGateway(t, b, ingest.Config{MaxInflightBytes: 1 << 10}, githubProvider())
	body := []byte(`{"zen":"` + strings.Repeat("z", 2<<10) + `"}`)
	if code, msg := do(t, githubRequest(t, gw.url, "ping", "d", body)); code != http.StatusServiceUnavailable {
		t.Errorf("got %d %q, want 503", code, msg)
	}
	small := []byte(`{"zen":"z"}`)
	if code, msg := do(t, githubRequest(t, gw.url, "ping", "d2", small)); code != http.StatusOK {
		t.Errorf("small body: got %d %q, want 200", code, msg)
	}
}

// startNATS runs a NATS server with JetStream that the test can stop.
func startNATS(t *testing.T) *server.Server {
	t.Helper()
	return bustest.StartServer(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
}

// TestBusDown: with the NATS server gone (the client is reconnecting) the
// gateway answers 503 before the provider's deadline; with the connection
// closed it answers 503 at once. Nothing is acknowledged to the provider.
func TestBusDown(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"opened","issue":{"number":1},"repository":{"full_name":"o/r"}}`)
	// The gateway holds a request while the bus is away for at most hold,
	// then answers 503; hold leaves the answer a second of the deadline, so
	// that a loaded machine still answers in time.
	const deadline, hold = 2 * time.Second, time.Second
	cfg := ingest.Config{Limits: map[string]ingest.Limits{"github": {Deadline: deadline, Hold: hold}}}

	t.Run("server shut down", func(t *testing.T) {
		t.Parallel()
		ns := startNATS(t)
		b, err := bus.Connect(t.Context(), bus.Config{URL: ns.ClientURL(), Prefix: bustest.RandomPrefix()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		gw := startGateway(t, b, cfg, githubProvider())
		// With the bus up the webhook is stored (retried while a loaded
		// machine answers 503, as a provider would).
		for stop := time.Now().Add(15 * time.Second); ; {
			code, msg := do(t, githubRequest(t, gw.url, "issues", "before", body))
			if code == http.StatusOK {
				break
			}
			if time.Now().After(stop) {
				t.Fatalf("with the bus up: got %d %q, want 200", code, msg)
			}
		}
		ns.Shutdown()
		ns.WaitForShutdown()
		start := time.Now()
		code, msg := do(t, githubRequest(t, gw.url, "issues", "during", body))
		took := time.Since(start)
		if code != http.StatusServiceUnavailable {
			t.Errorf("got %d %q, want 503", code, msg)
		}
		if took >= deadline {
			t.Errorf("503 after %s, want it before the provider's deadline %s", took, deadline)
		}
	})
	t.Run("connection closed", func(t *testing.T) {
		t.Parallel()
		b := bustest.Embedded(t)
		gw := startGateway(t, b, cfg, githubProvider())
		b.Conn().Close()
		if code, msg := do(t, githubRequest(t, gw.url, "issues", "closed", body)); code != http.StatusServiceUnavailable {
			t.Errorf("got %d %q, want 503", code, msg)
		}
		if v := counterSum(t, gw.reg, "relay_ingest_requests_total", "provider", "github", "status", "503"); v != 1 {
			t.Errorf("relay_ingest_requests_total{github,503} = %v, want 1", v)
		}
	})
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	cases := []struct {
		name      string
		cfg       ingest.Config
		pub       ingest.Publisher
		providers []mappers.Provider
	}{
		{"no providers", ingest.Config{}, b, nil},
		{"nil publisher", ingest.Config{}, nil, []mappers.Provider{githubProvider()}},
		{"provider twice", ingest.Config{}, b, []mappers.Provider{githubProvider(), githubProvider()}},
		{"negative limit", ingest.Config{Limits: map[string]ingest.Limits{"github": {MaxBody: -1}}}, b, []mappers.Provider{githubProvider()}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if _, err := ingest.New(c.cfg, c.pub, c.providers...); err == nil {
				t.Error("got nil error, want New to refuse")
			}
		})
	}
}

// threadOf is the thread an example belongs to, read from its JSON
// independently of the mapper.
func threadOf(t *testing.T, ex mapperstest.OctokitExample) string {
	thread, _ := mapperstest.GitHubThread(t, ex.Event, ex.Payload)
	return thread
}
