package gatewaybench

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/mappers/github"
)

func TestConfigBounds(t *testing.T) {
	t.Parallel()
	ok := Config{Relay: "relay", Config: ingestbench.Config{NATSURL: "nats://127.0.0.1:4222"}}
	for name, mod := range map[string]func(*Config){
		"no relay":    func(c *Config) { c.Relay = "" },
		"no nats":     func(c *Config) { c.NATSURL = "" },
		"concurrency": func(c *Config) { c.Concurrency = 5000 },
		"duration":    func(c *Config) { c.Duration = time.Hour },
		"rate":        func(c *Config) { c.Rate = 1_000_000 },
		"runs":        func(c *Config) { c.Runs = 1000 },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := ok
			mod(&c)
			if _, err := Run(t.Context(), c); err == nil {
				t.Errorf("Run(%+v): got nil error, want the bound refused", c)
			}
		})
	}
}

// TestCheckSignatures: a target passes the check only when it refuses a
// wrong or missing signature and answers 200 to a valid one.
func TestCheckSignatures(t *testing.T) {
	t.Parallel()
	key := []byte("bench-key")
	verifying := func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(github.HeaderSignature256) != github.Sign(key, ingestbench.Payload()) {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	for name, c := range map[string]struct {
		h    http.HandlerFunc
		want string // "" for no error, else a part of it
	}{
		"verifies":       {verifying, ""},
		"accepts all":    {func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }, "a wrong signature: answered 200"},
		"refuses all":    {func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) }, "a valid signature: answered 401"},
		"202 not 200":    {func(w http.ResponseWriter, r *http.Request) { verifying(noOK{w}, r) }, "a valid signature: answered 202"},
		"unsigned is ok": {func(w http.ResponseWriter, r *http.Request) { unsignedOK(verifying, w, r) }, "no signature: answered 200"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(c.h)
			defer srv.Close()
			err := checkSignatures(t.Context(), srv.Client(), srv.URL, key)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// noOK answers 202 where 200 was written.
type noOK struct{ http.ResponseWriter }

func (w noOK) WriteHeader(code int) {
	if code == http.StatusOK {
		code = http.StatusAccepted
	}
	w.ResponseWriter.WriteHeader(code)
}

// unsignedOK answers 200 to a request without a signature, else defers to h.
func unsignedOK(h http.HandlerFunc, w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(github.HeaderSignature256) == "" {
		w.WriteHeader(http.StatusOK)
		return
	}
	h(w, r)
}

// TestBenthosConfig: the Benthos job verifies the signature on the body as
// received, rejects a failed message, publishes with the delivery id as
// Nats-Msg-Id and bounds its publishes in flight.
func TestBenthosConfig(t *testing.T) {
	t.Parallel()
	for _, want := range []string{
		`- mapping: |`,
		`metadata("X-Hub-Signature-256") != "sha256=" + content().hash("hmac_sha256", "${WEBHOOK_SECRET}").encode("hex")`,
		`throw("signature mismatch")`,
		"- check: errored()\n        output:\n          reject:",
		`Nats-Msg-Id: ${! metadata("X-Github-Delivery") }`,
		`max_in_flight: ${BENCH_MAX_IN_FLIGHT}`,
		`address: ${BENCH_HTTP_ADDR}`,
	} {
		if !strings.Contains(benthosConfig, want) {
			t.Errorf("the Benthos config lacks %q", want)
		}
	}
	if strings.Contains(benthosConfig, "mutation") {
		t.Error("the Benthos config uses a mutation: its content() of a JSON body is not the bytes received")
	}
}

// TestReportRatios: the report gives each figure's median and range, and the
// gateway's throughput and CPU over Benthos's run by run.
func TestReportRatios(t *testing.T) {
	t.Parallel()
	res := func(name string, n int, cpu time.Duration) Result {
		return Result{Target: name,
			Saturation: ingestbench.Phase{Requests: n, Elapsed: time.Second, CPU: cpu},
			FixedRate:  ingestbench.Phase{Requests: 1000, Elapsed: time.Second, P50: time.Millisecond, P99: 3 * time.Millisecond}}
	}
	rep := &Report{Rate: 1000, Concurrency: 32, Duration: time.Second, Results: []Result{
		res("gw", 3000, 300*time.Millisecond), res("bt", 2000, 400*time.Millisecond),
		res("bt", 1000, 400*time.Millisecond), res("gw", 4000, 400*time.Millisecond),
	}}
	tp, cpu := rep.Ratios("bt")
	if len(tp) != 2 || tp[0] != 1.5 || tp[1] != 4 {
		t.Errorf("throughput ratios: got %v, want [1.5 4]", tp)
	}
	if len(cpu) != 2 || cpu[0] != 0.5 || cpu[1] != 0.25 {
		t.Errorf("CPU ratios: got %v, want [0.5 0.25]", cpu)
	}
	var out strings.Builder
	rep.Write(&out)
	missing := slices.DeleteFunc([]string{
		"webhooks/s at saturation         3500  [3000-4000]",
		"CPU ms per 1,000 at saturation   100.0  [100.0-100.0]",
		"CPU ms per 1,000 at saturation   300.0  [200.0-400.0]",
		"p99 ms at 1000/s                 3.00  [3.00-3.00]",
		"gw over bt, run by run",
		"webhooks/s at saturation         2.75  [1.50-4.00]",
	}, func(line string) bool { return strings.Contains(out.String(), line) })
	if len(missing) > 0 {
		t.Errorf("report lacks %q:\n%s", missing, out.String())
	}
}
