// Package ingest is the webhook gateway (`relay ingest`): it mounts
// POST /webhooks/{provider}[/{route}] on the shared HTTP server, verifies each
// request with its mappers.Provider on the raw body, maps it into envelopes and
// publishes every one to JetStream with the provider's delivery identity as
// Nats-Msg-Id. The provider gets its 2xx only after every envelope was
// acknowledged.
//
// Status codes: 405 for a method other than POST, 413 for a body over the
// provider's limit, 408 for a body that has not arrived by the provider's
// deadline, 401 for a missing or wrong signature (and for every request to a
// provider without a secret), 400 for a body that cannot be parsed, 503 when
// the bus does not acknowledge within the provider's deadline or the
// gateway's in-flight memory budget is spent, 500 for a mapper bug (an invalid
// envelope or subject, or a panic). A redelivered webhook is answered 2xx and
// stores nothing new: JetStream's duplicate window drops it.
//
// Hostile clients: body memory is reserved from the in-flight budget as the
// bytes arrive (the buffer starts at 4 KiB, or at what the server has already
// read of the body, and doubles only when full), never the length a request
// declares, and the body must arrive within the provider's deadline;
// so connections that send headers and nothing else hold a few KiB each and
// are cut off with 408, while valid webhooks keep being served.
//
// The gateway knows nothing about providers beyond mappers.Provider: the
// provider packages under mappers/ do verification and mapping.
package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
)

// Publisher is what the gateway needs from the bus; *bus.Bus implements it.
type Publisher interface {
	Publish(ctx context.Context, subject string, e *envelope.Envelope, opts ...bus.PublishOption) (bus.PublishResult, error)
}

// Limits bound one provider's requests.
type Limits struct {
	// MaxBody is the largest body accepted, in bytes; larger ones get 413.
	MaxBody int64
	// Deadline is how long the provider waits for an answer. The body must
	// have arrived by then (else 408), and the gateway answers 503 before it
	// passes when the bus has not acknowledged.
	Deadline time.Duration
	// Hold is how long, from the request's arrival, the gateway keeps
	// retrying a publish the bus could not take (no stream leader during an
	// election, no responders): it holds the request and retries with the
	// same message id (no duplicate) until Hold has passed, and only then
	// answers 503 with Retry-After. It must be shorter than Deadline, so
	// the answer reaches the provider before it gives up.
	Hold time.Duration
}

// DefaultLimits are the per-provider defaults: GitHub sends up to 25 MB and
// waits 10 s, Slack waits 3 s, Sentry 1 s, OpenProject 10 s (its webhook job
// uses Ruby's default HTTP timeouts); each is held up to its deadline less a
// margin for reading, mapping and answering.
var DefaultLimits = map[string]Limits{
	"github":      {MaxBody: 25 << 20, Deadline: 10 * time.Second, Hold: 9 * time.Second},
	"slack":       {MaxBody: 1 << 20, Deadline: 3 * time.Second, Hold: 2500 * time.Millisecond},
	"sentry":      {MaxBody: 5 << 20, Deadline: 1 * time.Second, Hold: 800 * time.Millisecond},
	"openproject": {MaxBody: 5 << 20, Deadline: 10 * time.Second, Hold: 9 * time.Second},
}

// fallbackLimits apply to a provider not in DefaultLimits.
var fallbackLimits = Limits{MaxBody: 5 << 20, Deadline: 10 * time.Second, Hold: 9 * time.Second}

// DefaultRoutes are the route suffixes of providers with more than one
// webhook URL, for providers that do not implement Router.
var DefaultRoutes = map[string][]string{
	"slack": {"events", "commands", "interactions"},
}

// Router is implemented by providers with several webhook URLs
// (/webhooks/{name}/{route}); the suffix reaches the provider in
// mappers.Request.Route.
type Router interface {
	Routes() []string
}

// Config configures the gateway.
type Config struct {
	// Limits per provider name; a missing provider or zero field takes
	// DefaultLimits.
	Limits map[string]Limits
	// MaxInflightBytes bounds the memory held by request bodies being
	// handled at once, counted as the bytes arrive; a request whose body
	// would pass it is answered 503 (the provider retries). Default 256 MiB.
	MaxInflightBytes int64
	// MaxInflightPerSource bounds the publishes of one source (a GitHub
	// repository, a Slack channel, a Sentry organisation, an OpenProject
	// host) in flight at once; a verified webhook past it is answered 503
	// with Retry-After at once, so a flood of one source holds a bounded
	// part of the gateway and never queues the others behind it. Default
	// 256 (above the webhooks one repository sends during an election
	// hold, so a leader election alone never refuses one); negative: no limit.
	MaxInflightPerSource int
	// MaxHeld bounds the requests held at once while the bus cannot take
	// a publish (Limits.Hold); a request that would pass it is answered 503
	// with Retry-After at once. Default 1024.
	MaxHeld int
	// Registerer, when set, receives the gateway's metrics.
	Registerer prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
	// LogPerSecond bounds the "webhook accepted" info lines (provider,
	// event, delivery, thread) written in one second; the others are
	// counted and summed up once a second ("suppressed"). Default
	// DefaultLogPerSecond; negative: none.
	LogPerSecond int
}

func (c *Config) setDefaults() {
	c.MaxInflightBytes = cmp.Or(c.MaxInflightBytes, 256<<20)
	c.MaxHeld = cmp.Or(c.MaxHeld, 1024)
	c.MaxInflightPerSource = cmp.Or(c.MaxInflightPerSource, DefaultMaxInflightPerSource)
	c.LogPerSecond = cmp.Or(c.LogPerSecond, DefaultLogPerSecond)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a configuration the gateway cannot run with.
func (c *Config) Validate() error {
	if c.MaxHeld < 0 {
		return fmt.Errorf("ingest: max held requests %d must be positive", c.MaxHeld)
	}
	if c.MaxInflightBytes < 0 {
		return fmt.Errorf("ingest: max in-flight bytes %d must be positive", c.MaxInflightBytes)
	}
	for name, l := range c.Limits {
		if l.MaxBody < 0 || l.Deadline < 0 || l.Hold < 0 {
			return fmt.Errorf("ingest: limits of %s: body %d, deadline %s and hold %s must not be negative", name, l.MaxBody, l.Deadline, l.Hold)
		}
	}
	return nil
}

// ErrNoProviders is returned by New without any provider.
var ErrNoProviders = errors.New("ingest: no providers")

var nameRE = regexp.MustCompile(`^[a-z0-9_-]+$`)

// Service is the webhook gateway. Mount its routes, then Run it. It is safe
// for concurrent use.
type Service struct {
	cfg      Config
	log      *slog.Logger
	pub      Publisher
	routes   []*route
	inflight *semaphore.Weighted
	held     chan struct{} // one token per held request (Config.MaxHeld)
	metrics  *metrics
	accepted *lineSampler
	sources  *sourceSlots // Config.MaxInflightPerSource
	busy     *lineSampler // the warnings of webhooks refused by sources
}

// DefaultMaxInflightPerSource is Config.MaxInflightPerSource's default.
const DefaultMaxInflightPerSource = 256

// route is one webhook URL of one provider.
type route struct {
	provider mappers.Provider
	name     string // provider name
	suffix   string // "" or a Router suffix
	path     string
	limits   Limits
	label    string // metrics route label
}

// New returns a gateway publishing to pub for the given providers. Provider
// names must be unique, lowercase route names.
func New(cfg Config, pub Publisher, providers ...mappers.Provider) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if pub == nil {
		return nil, errors.New("ingest: nil publisher")
	}
	if len(providers) == 0 {
		return nil, ErrNoProviders
	}
	s := &Service{
		cfg:      cfg,
		log:      cfg.Logger,
		pub:      pub,
		inflight: semaphore.NewWeighted(cfg.MaxInflightBytes),
		held:     make(chan struct{}, cfg.MaxHeld),
		metrics:  newMetrics(cfg.Registerer),
		accepted: &lineSampler{per: int64(cfg.LogPerSecond)},
		sources:  newSourceSlots(max(cfg.MaxInflightPerSource, 0)),
		busy:     &lineSampler{per: 1},
	}
	seen := map[string]bool{}
	for _, p := range providers {
		if p == nil {
			return nil, errors.New("ingest: nil provider")
		}
		name := p.Name()
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("ingest: provider name %q: want lowercase letters, digits, '-' or '_'", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("ingest: provider %s given twice", name)
		}
		seen[name] = true
		limits := cfg.Limits[name]
		def, ok := DefaultLimits[name]
		if !ok {
			def = fallbackLimits
		}
		if limits.MaxBody == 0 {
			limits.MaxBody = def.MaxBody
		}
		if limits.Deadline == 0 {
			limits.Deadline = def.Deadline
		}
		if limits.Hold == 0 {
			limits.Hold = min(def.Hold, time.Duration(float64(limits.Deadline)*publishShare))
		}
		if limits.Hold >= limits.Deadline {
			return nil, fmt.Errorf("ingest: hold %s of %s must be shorter than its deadline %s", limits.Hold, name, limits.Deadline)
		}
		suffixes := DefaultRoutes[name]
		if r, ok := p.(Router); ok {
			suffixes = r.Routes()
		}
		if len(suffixes) == 0 {
			suffixes = []string{""}
		}
		for _, suf := range suffixes {
			rt := &route{provider: p, name: name, suffix: suf, path: "/webhooks/" + name, limits: limits, label: suf}
			if suf != "" {
				if !nameRE.MatchString(suf) {
					return nil, fmt.Errorf("ingest: provider %s route %q: want lowercase letters, digits, '-' or '_'", name, suf)
				}
				rt.path += "/" + suf
			} else {
				rt.label = "-"
			}
			s.routes = append(s.routes, rt)
		}
	}
	return s, nil
}

// Paths returns the webhook paths the gateway serves.
func (s *Service) Paths() []string {
	out := make([]string, len(s.routes))
	for i, r := range s.routes {
		out[i] = r.path
	}
	return out
}

// Mount adds the webhook routes to e. Every method is routed so that a wrong
// one is answered 405 and counted.
func (s *Service) Mount(e *echo.Echo) {
	for _, rt := range s.routes {
		h := s.handler(rt)
		e.Any(rt.path, echo.WrapHandler(h))
	}
}

// Handler returns the gateway as a plain http.Handler (for tests and
// benchmarks without echo); unknown paths get 404.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes {
		mux.Handle(rt.path, s.handler(rt))
	}
	return mux
}

// Run blocks until ctx is cancelled, summing up once a second the
// "webhook accepted" lines the sampler left out. The HTTP server that
// carries the routes is owned by the caller, and its graceful shutdown lets
// requests being handled finish publishing.
func (s *Service) Run(ctx context.Context) error {
	s.reportSuppressed(ctx)
	return nil
}
