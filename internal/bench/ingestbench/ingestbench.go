// Package ingestbench is the load generator behind `relay bench ingest`: it
// starts an embedded JetStream (or uses an external server, Config.NATSURL)
// and the webhook gateway on loopback, posts signed GitHub `issues` webhooks
// to it and measures, in one run, with the process's CPU time per phase:
//
//   - saturation: requests/s with a fixed number of concurrent clients, and
//     the p50/p99 latency there;
//   - a fixed rate (1,000 requests/s by default): p50/p99 latency measured from
//     each request's scheduled send time, so a stall is not hidden;
//   - the ceilings: the same HTTP server with a handler that only reads the
//     body and answers 202, and raw JetStream publishing of the same bytes.
//
// Everything is bounded in count and time and targets only the loopback
// server the run starts itself.
package ingestbench

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/ingest"
)

// payload is a real `issues` `opened` webhook body (@octokit/webhooks-examples).
//
//go:embed issues.opened.json
var payload []byte

// Config bounds a run.
type Config struct {
	// Concurrency is the number of clients at saturation. Default 32, at most 1024.
	Concurrency int
	// Duration of each phase. Default 5s, at most 60s.
	Duration time.Duration
	// MaxRequests caps the requests of each phase. Default 200,000, at most 1,000,000.
	MaxRequests int
	// Rate is the fixed rate of the latency phase, requests/s. Default 1,000, at most 20,000.
	Rate int
	// DataDir holds the embedded JetStream files; default a temporary
	// directory removed afterwards.
	DataDir string
	// NATSURL, when set, is an external NATS server to publish to (under a
	// prefix of the run's own, whose streams are deleted afterwards) instead
	// of an embedded one.
	NATSURL string
	// Logger; nil discards.
	Logger *slog.Logger
}

// SetDefaults fills the settings left zero with their defaults.
func (c *Config) SetDefaults() {
	c.Concurrency = config.Positive(c.Concurrency, 32)
	c.Duration = config.Positive(c.Duration, 5*time.Second)
	c.MaxRequests = config.Positive(c.MaxRequests, 200_000)
	c.Rate = config.Positive(c.Rate, 1000)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports settings outside the generator's bounds.
func (c *Config) Validate() error {
	switch {
	case c.Concurrency > 1024:
		return fmt.Errorf("concurrency %d: at most 1024", c.Concurrency)
	case c.Duration > time.Minute:
		return fmt.Errorf("duration %s: at most 1m per phase", c.Duration)
	case c.MaxRequests > 1_000_000:
		return fmt.Errorf("max requests %d: at most 1,000,000 per phase", c.MaxRequests)
	case c.Rate > 20_000:
		return fmt.Errorf("rate %d/s: at most 20,000", c.Rate)
	}
	return nil
}

// Phase is the result of one phase.
type Phase struct {
	Name     string
	Requests int
	Errors   int // non-2xx answers or transport errors
	Elapsed  time.Duration
	P50, P99 time.Duration
	Max      time.Duration
	// CPU is the process's user + system CPU time during the phase: the
	// server side and the load generator, which run in one process.
	CPU time.Duration
}

// CPUPer1000 is the process CPU time per 1,000 requests of the phase.
func (p Phase) CPUPer1000() time.Duration {
	if p.Requests == 0 {
		return 0
	}
	return p.CPU * 1000 / time.Duration(p.Requests)
}

// PerSecond is the phase's throughput.
func (p Phase) PerSecond() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Requests) / p.Elapsed.Seconds()
}

// Report is the result of a run.
type Report struct {
	BodyBytes   int
	Concurrency int
	Saturation  Phase // gateway, closed loop
	FixedRate   Phase // gateway at Config.Rate, open loop
	HTTPCeiling Phase // same server, handler reads the body and answers 202
	NATSCeiling Phase // raw JetStream publishes of the same bytes
	// BothCeiling is the least any gateway must do: the same HTTP server with
	// a handler that reads the body, publishes it raw to JetStream and answers
	// 202 after the ack (no verification, mapping or validation).
	BothCeiling Phase
	Rate        int
	// Bus says where JetStream ran: "embedded" or the external server's URL.
	Bus string
	// Prefix is the run's subject prefix; its streams are named after it.
	Prefix string
}

// Write prints the report as a table.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "signed GitHub issues webhooks, %d-byte body, %d concurrent clients, JetStream %s (file store), loopback HTTP\n\n",
		r.BodyBytes, r.Concurrency, r.Bus)
	fmt.Fprintf(w, "%-34s %10s %8s %10s %10s %10s %8s %14s\n", "phase", "requests", "errors", "req/s", "p50", "p99", "max", "CPU/1,000 req")
	for _, p := range []Phase{r.Saturation, r.FixedRate, r.HTTPCeiling, r.NATSCeiling, r.BothCeiling} {
		fmt.Fprintf(w, "%-34s %10d %8d %10.0f %10s %10s %8s %14s\n", p.Name, p.Requests, p.Errors, p.PerSecond(),
			Round(p.P50), Round(p.P99), Round(p.Max), p.CPUPer1000().Round(time.Millisecond/10))
	}
	fmt.Fprintln(w, "\n(CPU is the whole process: gateway, load generator and, when embedded, the NATS server.)")
	ceiling := min(r.HTTPCeiling.PerSecond(), r.NATSCeiling.PerSecond())
	if ceiling > 0 {
		fmt.Fprintf(w, "\ngateway saturation = %.0f%% of the lower ceiling (%.0f/s)\n", 100*r.Saturation.PerSecond()/ceiling, ceiling)
	}
	if both := r.BothCeiling.PerSecond(); both > 0 {
		fmt.Fprintf(w, "gateway saturation = %.0f%% of HTTP read + raw publish + 202 (%.0f/s)\n", 100*r.Saturation.PerSecond()/both, both)
	}
}

// Round rounds a latency for a report: to 1 ms above a second, 10 µs above a
// millisecond, 1 µs below.
func Round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// Run starts the embedded bus and the gateway, runs the four phases and
// returns the report. ctx cancels the run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, where, cleanup, err := connectBus(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	key := uuid.NewString()
	base, stop, err := serve(ctx, cfg, b, key)
	if err != nil {
		return nil, err
	}
	defer stop()

	client := Client(cfg.Concurrency)
	defer client.CloseIdleConnections()

	webhook := Webhook(client, base+"/webhooks/github", []byte(key))
	null := post(client, base+"/bench/null", http.StatusAccepted)
	both := post(client, base+"/bench/publish", http.StatusAccepted)
	js, subject := b.JetStream(), b.Subject(rawSubject)
	raw := func(ctx context.Context) error {
		msg := &nats.Msg{Subject: subject, Data: payload, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, uuid.NewString())
		_, err := js.PublishMsg(ctx, msg)
		return err
	}

	rep := &Report{BodyBytes: len(payload), Concurrency: cfg.Concurrency, Rate: cfg.Rate, Bus: where, Prefix: b.Prefix()}
	// Warm up connections, the stream files and the schema compiler.
	if _, err := ClosedLoop(ctx, "warm-up", cfg.Concurrency, time.Second, 2000, webhook); err != nil {
		return nil, err
	}
	if rep.Saturation, err = ClosedLoop(ctx, "gateway at saturation", cfg.Concurrency, cfg.Duration, cfg.MaxRequests, webhook); err != nil {
		return nil, err
	}
	if rep.FixedRate, err = OpenLoop(ctx, fmt.Sprintf("gateway at %d/s", cfg.Rate), cfg.Rate, cfg.Duration, cfg.MaxRequests, webhook); err != nil {
		return nil, err
	}
	if rep.HTTPCeiling, err = ClosedLoop(ctx, "ceiling: HTTP read body + 202", cfg.Concurrency, cfg.Duration, cfg.MaxRequests, null); err != nil {
		return nil, err
	}
	if rep.NATSCeiling, err = ClosedLoop(ctx, "ceiling: raw JetStream publish", cfg.Concurrency, cfg.Duration, cfg.MaxRequests, raw); err != nil {
		return nil, err
	}
	if rep.BothCeiling, err = ClosedLoop(ctx, "ceiling: HTTP read + raw publish", cfg.Concurrency, cfg.Duration, cfg.MaxRequests, both); err != nil {
		return nil, err
	}
	return rep, nil
}

// connectBus connects to cfg.NATSURL under a prefix of the run's own, or
// starts an embedded server; cleanup deletes the run's streams (external)
// or the temporary store (embedded) and closes the bus.
func connectBus(ctx context.Context, cfg Config) (b *bus.Bus, where string, cleanup func(), err error) {
	if cfg.NATSURL != "" {
		prefix := "bench" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
		b, err = bus.Connect(ctx, bus.Config{URL: cfg.NATSURL, FailFast: true, Prefix: prefix, Name: "relay-bench", Logger: cfg.Logger})
		if err != nil {
			return nil, "", nil, err
		}
		return b, "at " + secret.RedactURLs(cfg.NATSURL), func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := b.DeleteStreams(dctx); err != nil {
				cfg.Logger.Warn("delete the bench streams", "prefix", prefix, "err", err)
			}
			b.Close()
		}, nil
	}
	dir := cfg.DataDir
	rm := func() {}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "relay-bench-"); err != nil {
			return nil, "", nil, err
		}
		rm = func() { _ = os.RemoveAll(dir) }
	}
	b, err = bus.Connect(ctx, bus.Config{DataDir: dir, Listen: "127.0.0.1:0", Prefix: "bench", Name: "relay-bench", Logger: cfg.Logger})
	if err != nil {
		rm()
		return nil, "", nil, err
	}
	return b, "embedded", func() { b.Close(); rm() }, nil
}

// rawSubject is where the raw-publish ceilings publish, relative to the bus
// prefix.
const rawSubject = "in.bench.raw"

// serve starts an HTTP server with the gateway (GitHub, secret key) and the
// two ceiling routes: /bench/null reads the body and answers 202,
// /bench/publish also publishes it to JetStream as is. It returns the
// server's base URL and a function that stops it.
func serve(ctx context.Context, cfg Config, b *bus.Bus, key string) (string, func(), error) {
	gw, err := ingest.New(ingest.Config{Logger: cfg.Logger}, b, github.New(github.Config{Secret: secret.New(key)}))
	if err != nil {
		return "", nil, err
	}
	srv := httpserver.New(cfg.Logger, prometheus.NewRegistry())
	gw.Mount(srv.Echo)
	srv.Echo.POST("/bench/null", func(c echo.Context) error {
		if _, err := io.Copy(io.Discard, c.Request().Body); err != nil {
			return err
		}
		return c.NoContent(http.StatusAccepted)
	})
	js, subject := b.JetStream(), b.Subject(rawSubject)
	srv.Echo.POST("/bench/publish", func(c echo.Context) error {
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, uuid.NewString())
		if _, err := js.PublishMsg(c.Request().Context(), msg); err != nil {
			return c.NoContent(http.StatusServiceUnavailable)
		}
		return c.NoContent(http.StatusAccepted)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- srv.ServeListener(sctx, ln) }()
	return "http://" + ln.Addr().String(), func() { stop(); <-served }, nil
}

// Client is an HTTP client for loopback load from n concurrent callers: it
// keeps 2n idle connections to the one host, and does not ask for gzipped
// answers (Go's default Accept-Encoding: gzip), which are a few bytes: a
// server that honours it, such as Benthos's http_server, would spend more on
// a gzip writer per answer than on the webhook.
func Client(n int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: n * 2, MaxIdleConnsPerHost: n * 2, IdleConnTimeout: time.Minute, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}, Timeout: 30 * time.Second}
}

// Webhook returns an operation that posts the payload to url as a GitHub
// `issues` webhook signed with key (X-Hub-Signature-256), with a new
// X-GitHub-Delivery id each time, and wants 200.
func Webhook(client *http.Client, url string, key []byte) func(context.Context) error {
	sig := github.Sign(key, payload)
	return func(ctx context.Context) error {
		return want(http.StatusOK)(Send(ctx, client, url, sig))
	}
}

// Send posts the payload to url once as a GitHub `issues` webhook with a new
// X-GitHub-Delivery id and the X-Hub-Signature-256 header sig (none when
// empty), and returns the answer's status.
func Send(ctx context.Context, client *http.Client, url, sig string) (int, error) {
	return do(ctx, client, url, func(h http.Header) {
		github.SetHeaders(h, "issues", uuid.NewString(), "1", sig)
	})
}

// post returns an operation that posts the payload as JSON to url and wants
// the answer status code.
func post(client *http.Client, url string, code int) func(context.Context) error {
	return func(ctx context.Context) error {
		return want(code)(do(ctx, client, url, nil))
	}
}

// do posts the payload as JSON to url with the headers hdr sets (when not
// nil) and returns the answer's status.
func do(ctx context.Context, client *http.Client, url string, hdr func(http.Header)) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if hdr != nil {
		hdr(req.Header)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// want turns a status and an error into an error unless the status is code.
func want(code int) func(int, error) error {
	return func(status int, err error) error {
		if err == nil && status != code {
			err = fmt.Errorf("status %d, want %d", status, code)
		}
		return err
	}
}

// ClosedLoop runs op from n workers back to back until d passed or max ops
// ran; CPU is this process's.
func ClosedLoop(ctx context.Context, name string, n int, d time.Duration, max int, op func(context.Context) error) (Phase, error) {
	var (
		issued atomic.Int64
		errs   atomic.Int64
		mu     sync.Mutex
		lat    = make([]time.Duration, 0, min(max, 1<<20))
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second) // bounds a stuck request
	defer cancel()
	cpu0 := processCPU()
	start := time.Now()
	end := start.Add(d)
	for range n {
		wg.Go(func() {
			local := make([]time.Duration, 0, 1024)
			for time.Now().Before(end) && issued.Add(1) <= int64(max) && ctx.Err() == nil {
				t0 := time.Now()
				if err := op(ctx); err != nil {
					errs.Add(1)
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil && errors.Is(err, context.Canceled) {
		return Phase{}, err
	}
	p := summarize(name, lat, int(errs.Load()), elapsed)
	p.CPU = processCPU() - cpu0
	return p, nil
}

// OpenLoop sends op at a fixed rate for d (at most max ops); each latency is
// measured from the op's scheduled time; CPU is this process's.
func OpenLoop(ctx context.Context, name string, rate int, d time.Duration, max int, op func(context.Context) error) (Phase, error) {
	total := min(int(d.Seconds()*float64(rate)), max)
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, total)
	ok := make([]bool, total)
	var errs atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 1024) // bounds outstanding requests
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	cpu0 := processCPU()
	start := time.Now()
	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			t := time.NewTimer(w)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return Phase{}, ctx.Err()
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return Phase{}, ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := op(ctx); err != nil {
				errs.Add(1)
				return
			}
			lat[i], ok[i] = time.Since(at), true
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	kept := lat[:0]
	for i, l := range lat {
		if ok[i] {
			kept = append(kept, l)
		}
	}
	p := summarize(name, kept, int(errs.Load()), elapsed)
	p.CPU = processCPU() - cpu0
	return p, nil
}

// processCPU is the user + system CPU time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func summarize(name string, lat []time.Duration, errs int, elapsed time.Duration) Phase {
	slices.Sort(lat)
	p := Phase{Name: name, Requests: len(lat), Errors: errs, Elapsed: elapsed}
	if len(lat) > 0 {
		p.P50 = lat[len(lat)*50/100]
		p.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
		p.Max = lat[len(lat)-1]
	}
	return p
}

// Payload returns the real `issues` `opened` webhook body the generator
// sends (callers must not modify it).
func Payload() []byte { return payload }
