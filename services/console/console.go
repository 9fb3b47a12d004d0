package console

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the console.
type Config struct {
	// Addr is the listen address (RELAY_CONSOLE_ADDR). Default DefaultAddr.
	Addr string
	// Token is the sign-in token (RELAY_CONSOLE_TOKEN). Required when Addr
	// is not loopback; when set, every page needs a signed-in session.
	Token secret.Value
	// Operators are named operators, each with a token of their own
	// (RELAY_CONSOLE_OPERATORS): signing in with one names the operator by
	// configuration. With only Token, the name is typed at sign-in and is
	// marked self-declared wherever it is recorded.
	Operators []Operator
	// Tools is the tool runners' shared state (enable, disable, stop); nil
	// shows the servers without those actions.
	Tools tools.StateStore
	// Story builds a story; nil tells it from the events the console has
	// seen (Recent).
	Story Storyteller
	// Recent is how many envelopes the console keeps in memory while it
	// follows the bus (and loads from the streams when it starts to).
	// Default 2000.
	Recent int
	// Idle is how long the console follows the bus after the last request
	// for its envelopes, when no live page is open (RELAY_CONSOLE_IDLE);
	// then it unsubscribes and lets its envelopes go until the next one.
	// Default DefaultIdle.
	Idle time.Duration
	// SessionTTL is how long a sign-in lasts. Default 12h.
	SessionTTL time.Duration
	// Connect runs the OAuth flows of remote MCP servers (Connect and
	// Disconnect on the tools page, `/relay connect` links); nil shows
	// neither and answers /oauth/* with 404.
	Connect Connector
	// PublicURL is the console's URL as browsers reach it
	// (RELAY_CONSOLE_URL): the OAuth redirect is PublicURL/oauth/callback.
	// Empty: the Host of the request that starts the flow.
	PublicURL string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	c.Addr = cmp.Or(c.Addr, DefaultAddr)
	c.Recent = config.Positive(c.Recent, 2000)
	c.Idle = config.Positive(c.Idle, DefaultIdle)
	c.SessionTTL = config.Positive(c.SessionTTL, 12*time.Hour)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// ErrNoToken is returned for a non-loopback address without a token.
var ErrNoToken = errors.New("console: RELAY_CONSOLE_TOKEN is required when RELAY_CONSOLE_ADDR is not a loopback address")

// Validate reports a configuration the console cannot run with.
func (c *Config) Validate() error {
	if !Loopback(c.Addr) && !c.Token.IsSet() && len(c.Operators) == 0 {
		return fmt.Errorf("%w (it is %q)", ErrNoToken, c.Addr)
	}
	if c.Token.IsSet() && len(c.Token.Reveal()) < MinTokenLen {
		return fmt.Errorf("console: RELAY_CONSOLE_TOKEN is too short: at least %d characters", MinTokenLen)
	}
	return checkOperators(c.Operators, c.Token)
}

// Service is the console. Run it once; it is safe for concurrent use.
type Service struct {
	cfg       Config
	log       *slog.Logger
	bus       *bus.Bus
	hub       *hub
	sessions  *sessions
	throttle  *throttle
	liveMu    sync.Mutex
	liveTotal int
	tmpl      *template.Template
	story     Storyteller
	handler   http.Handler
	// inbound remembers the inbound stream's sequence at each minute
	// boundary of the overview's chart.
	inbound minuteSeqs
	// providers remembers the ended minutes' split per provider.
	providers providerMinutes
	// deadLetters is the same for the dead-letter stream.
	deadLetters minuteSeqs
	// latency measures the stages from webhook to comment; toolCalls counts
	// the tool runner's calls and failures per server.
	latency   latencies
	toolCalls toolMinutes
}

// chartEvery is the least time between two reads of the streams by the
// latency and tool charts (an open overview re-renders more often on a busy
// bus; their points are minutes apart).
const chartEvery = 2 * time.Second

// New returns the console (not started) reading and acting on b.
func New(cfg Config, b *bus.Bus) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tmpl, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	s := &Service{cfg: cfg, log: cfg.Logger, bus: b, tmpl: tmpl,
		hub: newHub(b, cfg.Recent, cfg.Idle, cfg.Now, cfg.Logger), sessions: newSessions(cfg.Token, cfg.Operators, cfg.SessionTTL, cfg.Now)}
	s.throttle = newThrottle(cfg.Now)
	s.latency.every, s.toolCalls.every = chartEvery, chartEvery
	s.story = cfg.Story
	if s.story == nil {
		s.story = hubStory{s.hub}
	}
	s.handler = s.routes()
	return s, nil
}

// Handler is the console's HTTP handler (for tests and embedding).
func (s *Service) Handler() http.Handler { return s.handler }

// Run listens on Config.Addr and serves until ctx is cancelled; then it
// stops the listener within 5 s, and stops following the bus. It follows
// the bus only while the console is looked at (see the package doc).
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("console: listen on %s (RELAY_CONSOLE_ADDR): %w", s.cfg.Addr, err)
	}
	defer s.hub.close()
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	login := "no sign-in (loopback)"
	switch {
	case s.cfg.Token.IsSet() && len(s.cfg.Operators) > 0:
		login = "sign in with an operator's token (RELAY_CONSOLE_OPERATORS) or RELAY_CONSOLE_TOKEN (name self-declared)"
	case len(s.cfg.Operators) > 0:
		login = "sign in with an operator's token (RELAY_CONSOLE_OPERATORS)"
	case s.cfg.Token.IsSet():
		login = "sign in with RELAY_CONSOLE_TOKEN (names self-declared)"
	}
	s.log.Info("operator console listening", "url", "http://"+ln.Addr().String()+"/", "access", login)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// staticFiles serves the embedded assets under /static/.
func staticFiles() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	return http.StripPrefix("/static/", http.FileServer(http.FS(sub)))
}
