package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"golang.org/x/term"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/httpserver"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/secret"
)

// command is an operator subcommand (`relay dlq`, `relay mcp`, ...).
type command struct {
	name, usage, summary string
	// run reads its settings from a.env (checked before anything connects by
	// a.checkEnv) and does the work.
	run func(ctx context.Context, a *app, args []string) error
}

// service is a long-running worker that `relay serve` runs with all others and
// `relay <name>` runs alone.
type service struct {
	name, summary string
	// configure reads the service's settings into env (problems are recorded
	// there, and startup stops before anything connects) and returns the
	// function that builds the running service once the bus is up.
	configure func(env *config.Env) buildFunc
	// subcommands, when set, handles `relay <name> <args...>`: the service's
	// operator commands (`relay memory recall ...`). Without args the service runs.
	subcommands func(ctx context.Context, a *app, args []string) error
}

// buildFunc builds a service on shared dependencies; its routes are mounted
// before the HTTP server starts and run blocks until ctx is cancelled.
type buildFunc func(ctx context.Context, d *deps) (*runner, error)

type runner struct {
	// routes, when set, mounts HTTP routes (webhooks, interactivity).
	routes func(s *httpserver.Server)
	// run blocks until ctx is cancelled, draining in-flight work before it returns.
	run func(ctx context.Context) error
	// close, when set, releases resources after run returned.
	close func()
}

// runnable is a built service: Run blocks until ctx is cancelled, draining
// in-flight work before it returns.
type runnable interface {
	Run(ctx context.Context) error
}

// runnerOf is the runner of a service built without routes, for the build's
// last line: return runnerOf(outbound.New(ctx, cfg, d.Bus)).
func runnerOf(svc runnable, err error) (*runner, error) {
	if err != nil {
		return nil, err
	}
	return &runner{run: svc.Run}, nil
}

// deps are what services share in one process.
type deps struct {
	Bus *bus.Bus
	// Log is the process's logger, scoped with the service's name
	// ("service") for its build.
	Log      *slog.Logger
	Registry *prometheus.Registry
	DataDir  string
}

var (
	commands = map[string]*command{}
	services = map[string]*service{}
)

func registerCommand(c *command) { commands[c.name] = c }
func registerService(s *service) { services[s.name] = s }

// app carries what every subcommand needs: the environment, the logger and
// the output streams.
type app struct {
	env    *config.Env
	log    *slog.Logger
	stdout io.Writer
	stderr io.Writer
	base   baseConfig
	// httpListening is the address the HTTP server listens on, once it does.
	httpListening string
	// busPrefix, when set, replaces the bus's default subject and stream
	// prefix ("relay"): `relay bench proc -prefix` on a shared server.
	busPrefix string
}

// baseConfig are the settings every process reads.
type baseConfig struct {
	HTTPAddr string
	// MetricsAddr, when set, moves /healthz, /readyz and /metrics off
	// HTTPAddr onto a listener of their own.
	MetricsAddr string
	NATSURL     string
	DataDir     string
	NATSListen  string
	// NATSListenSet reports RELAY_NATS_LISTEN set: when it is not and the
	// default address is taken, `relay serve` listens on a free port.
	NATSListenSet bool
	// NATSToken is required by the embedded server from every client, and
	// used by the operator commands and by workers whose NATS_URL has no
	// credentials of its own.
	NATSToken secret.Value
	// Replicas of every stream and key-value bucket.
	Replicas int
}

func (a *app) readBase() {
	a.base = baseConfig{
		HTTPAddr:   a.env.Addr("RELAY_HTTP_ADDR", ":8080"),
		NATSURL:    a.env.URL("NATS_URL", "nats", "tls", "nats+tls"),
		DataDir:    a.env.String("RELAY_DATA_DIR", "./data"),
		NATSListen: a.env.Addr("RELAY_NATS_LISTEN", "127.0.0.1:4222"),
		NATSToken:  a.env.Secret("RELAY_NATS_TOKEN"),
		Replicas:   a.env.Int("RELAY_STREAM_REPLICAS", 1, 1, 5),
	}
	a.base.NATSListenSet = a.env.String("RELAY_NATS_LISTEN", "") != ""
	if a.env.String("RELAY_METRICS_ADDR", "") != "" {
		a.base.MetricsAddr = a.env.Addr("RELAY_METRICS_ADDR", "")
	}
}

// checkEnv stops on any invalid or unknown RELAY_* setting, naming it. A
// setting is known when any service of the binary reads it, so one .env file
// serves every subcommand.
func (a *app) checkEnv() error {
	scratch := a.env.Scratch()
	for _, s := range services {
		s.configure(scratch)
	}
	a.env.Known(scratch)
	a.env.Unknown("RELAY_")
	if err := a.env.Err(); err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	return nil
}

// busConfig is the bus configuration of a long-running process.
func (a *app) busConfig(reg *prometheus.Registry) bus.Config {
	cfg := bus.Config{URL: a.base.NATSURL, DataDir: a.base.DataDir, Listen: a.base.NATSListen,
		Token: a.base.NATSToken, Replicas: a.base.Replicas, Prefix: a.busPrefix, Logger: a.log}
	if reg != nil {
		cfg.Metrics = bus.NewMetrics(reg)
	}
	if telemetry.Enabled() {
		cfg.Trace = telemetry.BusHooks()
	}
	return cfg
}

// flags is a command's flag set: errors return (ContinueOnError) and usage
// goes to the command's stderr.
func (a *app) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	return fs
}

// startTracing turns tracing on when the OTEL_* variables name an OTLP
// endpoint: spans are exported there, NATS messages carry the trace
// context, and log lines logged with a span's context carry its trace_id.
// The returned function flushes the spans on the way out.
func (a *app) startTracing(ctx context.Context, s telemetry.Settings) (func(), error) {
	shutdown, err := telemetry.Setup(ctx, s)
	if err != nil {
		return nil, err
	}
	if !telemetry.Enabled() {
		return func() {}, nil
	}
	a.log = slog.New(telemetry.LogHandler(a.log.Handler()))
	a.log.Info("tracing on: spans exported over OTLP/HTTP", "endpoint", secret.RedactURLs(s.Endpoint), "service", s.Service)
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			a.log.Warn("spans not flushed", "err", err)
		}
	}, nil
}

// clientBus connects an operator command to the running relay: NATS_URL, or
// the bus of the `relay serve` recorded in RELAY_DATA_DIR (relay.json), or
// the embedded server on RELAY_NATS_LISTEN. It says on stderr, never on
// stdout, which address it uses and why, then the server it reached (the
// error of a failed connection names the URL it tried).
func (a *app) clientBus(ctx context.Context) (*bus.Bus, error) {
	url, why := a.busURL()
	fmt.Fprintf(a.stderr, "relay: using the bus at %s: %s\n", secret.RedactURLs(url), why)
	b, err := bus.Connect(ctx, bus.Config{URL: url, Token: a.base.NATSToken, Replicas: a.base.Replicas,
		FailFast: true, Name: "relay-cli", Logger: a.log})
	if err != nil {
		return nil, fmt.Errorf("%w (is `relay serve` running? otherwise set NATS_URL)", err)
	}
	reportServer(a.stderr, b.Conn(), b.Prefix())
	return b, nil
}

// parseDial parses a command's flags and connects to the bus its
// environment names (clientBus); the caller closes the bus.
func (a *app) parseDial(ctx context.Context, fs *flag.FlagSet, args []string) (*bus.Bus, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return a.clientBus(ctx)
}

// Run runs one relay command and returns the process exit code.
func Run(ctx context.Context, args []string, env *config.Env, stdout, stderr io.Writer) int {
	log, err := newLogger(env, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "relay:", err)
		return 2
	}
	routeLogrus(log)
	a := &app{env: env, log: log, stdout: stdout, stderr: stderr}
	a.readBase()
	name := "serve"
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	switch {
	case name == "help" || name == "-h" || name == "--help":
		usage(stdout)
		return 0
	case name == "serve" && len(args) > 0 && isHelp(args[0]):
		usage(stdout)
		return 0
	case name == "serve" && len(args) > 0:
		err = &exitError{code: 2, msg: fmt.Sprintf("serve takes no arguments (got %q); its settings are RELAY_* variables", args)}
	case name == "serve":
		err = a.serve(ctx, sortedServices())
	case services[name] != nil && len(args) > 0 && services[name].subcommands != nil:
		err = services[name].subcommands(ctx, a, args)
	case services[name] != nil && len(args) > 0 && isHelp(args[0]):
		fmt.Fprintf(stdout, "usage: relay %s\n  %s; its settings are RELAY_* variables (docs/configuration.md)\n", name, services[name].summary)
		return 0
	case services[name] != nil && len(args) > 0:
		err = &exitError{code: 2, msg: fmt.Sprintf("%s takes no arguments (got %q); its settings are RELAY_* variables", name, args)}
	case services[name] != nil:
		err = a.serve(ctx, []*service{services[name]})
	case commands[name] != nil:
		err = commands[name].run(ctx, a, args)
	default:
		fmt.Fprintf(stderr, "relay: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(stderr, "relay:", ee.msg)
			}
			return ee.code
		}
		fmt.Fprintln(stderr, "relay:", err)
		return 1
	}
	return 0
}

// exitError ends a command with a specific exit code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// subcommands are a command's subcommands (`relay dlq list`), by name.
type subcommands map[string]func(ctx context.Context, a *app, args []string) error

// run runs the subcommand args[0] of the command name with the rest of
// args; without one, or with one it does not know, it ends with exit code 2
// and usage. Asked for help (-h, -help, --help, help), it prints usage on
// stdout and ends with exit code 0.
func (subs subcommands) run(ctx context.Context, a *app, name, usage string, args []string) error {
	if len(args) == 0 {
		return &exitError{code: 2, msg: usage}
	}
	if isHelp(args[0]) {
		fmt.Fprintln(a.stdout, usage)
		return nil
	}
	if f := subs[args[0]]; f != nil {
		return f(ctx, a, args[1:])
	}
	return &exitError{code: 2, msg: fmt.Sprintf("%s: unknown subcommand %q\n%s", name, args[0], usage)}
}

// isHelp reports whether arg asks for a command's usage.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

func sortedServices() []*service {
	out := make([]*service, 0, len(services))
	for _, s := range services {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: relay [command] [args]")
	fmt.Fprintln(w, "\nservices (long-running; `relay serve`, the default, runs them all in one process):")
	fmt.Fprintf(w, "  %-12s %s\n", "serve", "every service below, in one process")
	for _, s := range sortedServices() {
		fmt.Fprintf(w, "  %-12s %s\n", s.name, s.summary)
	}
	fmt.Fprintln(w, "\ncommands:")
	for _, n := range slices.Sorted(maps.Keys(commands)) {
		fmt.Fprintf(w, "  %-12s %s\n", n+" "+commands[n].usage, commands[n].summary)
	}
	fmt.Fprintln(w, "\nSettings come from environment variables; see docs/configuration.md.")
}

// serve runs the given services in one process with a shared bus and HTTP server.
func (a *app) serve(ctx context.Context, svcs []*service) error {
	builds := make([]buildFunc, len(svcs))
	for i, s := range svcs {
		builds[i] = s.configure(a.env)
	}
	tel := telemetry.ReadSettings(a.env)
	if err := a.checkEnv(); err != nil {
		return err
	}
	stopTracing, err := a.startTracing(ctx, tel)
	if err != nil {
		return err
	}
	defer stopTracing()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	start := time.Now()
	a.freeNATSListen()
	// The bus may not be reachable yet: health endpoints answer from the
	// start (readiness 503 until the bus is up), webhooks get 503 with
	// Retry-After, and the services are built once the bus is up.
	b, err := bus.Open(a.busConfig(reg))
	if err != nil {
		return err
	}
	defer b.Close()
	srv := httpserver.New(a.log, reg)
	srv.AddCheck("bus", b.Ready)
	// Until every service is built (its buckets and consumers in place,
	// which the bus check names while it waits for them), not ready.
	var building atomic.Pointer[string]
	building.Store(new("the bus"))
	srv.AddCheck("services", func(context.Context) error {
		if p := building.Load(); p != nil {
			return fmt.Errorf("starting: waiting for %s", *p)
		}
		return nil
	})
	srv.AddLiveness("bus", func(context.Context) error { return b.Alive() })
	srv.Hold()
	// The HTTP server stops only after the workers drained, so health stays up
	// while in-flight messages finish.
	httpCtx, httpStop := context.WithCancel(context.WithoutCancel(ctx))
	defer httpStop()
	httpErr, err := a.listen(httpCtx, srv)
	if err != nil {
		return err
	}
	if err := b.WaitReady(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before the bus came up
		}
		return err
	}
	var runners []*runner
	defer func() {
		for _, r := range runners {
			if r.close != nil {
				r.close()
			}
		}
	}()
	d := &deps{Bus: b, Log: a.log, Registry: reg, DataDir: a.base.DataDir}
	runners, err = buildRunners(ctx, d, svcs, builds, srv, func(name string) { building.Store(new("service " + name)) })
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for NATS
		}
		return err
	}
	// The record is written before /readyz answers 200, so an operator
	// command started once the relay is ready finds it.
	if unrecord, err := a.recordRunning(svcs, b, start); err != nil {
		a.log.Warn("operator commands will not find this relay by its data dir", "err", err)
	} else {
		defer unrecord()
	}
	building.Store(nil)
	srv.Release()
	a.logStarted(svcs, b, start)
	err = runAll(ctx, b, runners, httpErr)
	httpStop()
	if herr := <-httpErr; herr != nil && err == nil {
		err = herr
	}
	if err == nil || errors.Is(err, context.Canceled) {
		a.log.Info("relay stopped")
		return nil
	}
	return err
}

// listen starts the HTTP server on RELAY_HTTP_ADDR and, when set, the ops
// endpoints on RELAY_METRICS_ADDR, until ctx is cancelled; their results
// arrive on the returned channel.
func (a *app) listen(ctx context.Context, srv *httpserver.Server) (chan error, error) {
	ln, err := net.Listen("tcp", a.base.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("RELAY_HTTP_ADDR %s: %w", a.base.HTTPAddr, err)
	}
	a.httpListening = ln.Addr().String()
	httpErr := make(chan error, 2)
	go func() { httpErr <- srv.ServeListener(ctx, ln) }()
	if a.base.MetricsAddr != "" {
		srv.SeparateOps()
		opsLn, err := net.Listen("tcp", a.base.MetricsAddr)
		if err != nil {
			return nil, fmt.Errorf("RELAY_METRICS_ADDR %s: %w", a.base.MetricsAddr, err)
		}
		go func() { httpErr <- srv.ServeOpsListener(ctx, opsLn) }()
	}
	return httpErr, nil
}

// buildRunners builds the services on d and mounts their routes; on an error
// it returns the runners built so far, for the caller to close.
// Each build waits for the streams, buckets and consumers it needs (the
// bus retries while NATS is slow or leaderless); starting names the service
// being built, for readiness.
func buildRunners(ctx context.Context, d *deps, svcs []*service, builds []buildFunc, srv *httpserver.Server, starting func(name string)) ([]*runner, error) {
	runners := make([]*runner, 0, len(svcs))
	for i, build := range builds {
		starting(svcs[i].name)
		sd := *d
		sd.Log = d.Log.With("service", svcs[i].name)
		r, err := build(ctx, &sd)
		if err != nil {
			return runners, fmt.Errorf("%s: %w", svcs[i].name, err)
		}
		runners = append(runners, r)
		if r.routes != nil {
			r.routes(srv)
		}
	}
	return runners, nil
}

func (a *app) logStarted(svcs []*service, b *bus.Bus, start time.Time) {
	names := make([]string, len(svcs))
	for i, s := range svcs {
		names[i] = s.name
	}
	v := readVersion(debug.ReadBuildInfo())
	a.log.Info("relay started", "services", strings.Join(names, ","), "version", v.Version, "revision", v.Revision,
		"nats", secret.RedactURLs(b.ClientURL()), "embedded_nats", a.base.NATSURL == "", "http", a.base.HTTPAddr,
		"ops", cmp.Or(a.base.MetricsAddr, a.base.HTTPAddr), "startup", time.Since(start).Round(time.Millisecond).String())
}

// runAll runs the runners until ctx is cancelled, one of them fails, the
// HTTP server stops or the bus connection is lost for good.
func runAll(ctx context.Context, b *bus.Bus, runners []*runner, httpErr chan error) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range runners {
		if r.run != nil {
			g.Go(func() error { return r.run(gctx) })
		}
	}
	g.Go(func() error {
		select {
		case err := <-httpErr:
			httpErr <- err
			if err != nil {
				return err
			}
			return errors.New("http server stopped")
		case <-b.Lost():
			// Nothing in this process can bring the connection back: stop,
			// so that the supervisor starts a fresh one.
			return b.Alive()
		case <-gctx.Done():
			return nil
		}
	})
	return g.Wait()
}

func newLogger(env *config.Env, w io.Writer) (*slog.Logger, error) {
	level := env.OneOf("RELAY_LOG_LEVEL", "info", "debug", "info", "warn", "error")
	format := env.OneOf("RELAY_LOG_FORMAT", "auto", "auto", "text", "json")
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("RELAY_LOG_LEVEL: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: redactAttr}
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}

// redactAttr removes every secret the process read (secret.RedactKnown)
// and credentials of URLs (NATS_URL, REDIS_URL, DATABASE_URL, and any URL
// an error quotes) from every attribute of every log line.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	clean := func(s string) string {
		s, _ = secret.RedactKnown(s)
		return secret.RedactURLs(s)
	}
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); clean(s) != s {
			a.Value = slog.StringValue(clean(s))
		}
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok && err != nil {
			if s := err.Error(); clean(s) != s {
				a.Value = slog.StringValue(clean(s))
			}
		}
	}
	return a
}
