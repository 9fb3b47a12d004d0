// Package rpc puts the relay's request/reply endpoints (the tool runner's
// rpc.tool.* and the memory worker's rpc.memory.*) on nats.go/micro, and is
// the client side of them.
//
// A Server is one micro service per worker type ("relay-toolrunner",
// "relay-memory"): its endpoints answer on the relay's subjects (bus prefix
// applied) in a queue group, so the instances of a worker compete for
// requests; `$SRV.PING|INFO|STATS` discover them and report per-endpoint
// counts and errors.
//
// Compatibility across a rolling restart, when relays from before micro and
// relays on micro answer and ask side by side:
//
//   - A reply keeps the body it had before micro. An error is in the body as
//     before (for old clients) and also in micro's Nats-Service-Error and
//     Nats-Service-Error-Code headers (for new clients and `nats micro`).
//   - The queue groups keep their names ("toolrunner", "memory"), so an old
//     and a new instance of a worker compete for a request: exactly one of
//     them answers it, and a write (memory remember, forget) runs once.
//   - Call understands both: a reply with the error headers is an *Error;
//     a reply without them is returned for the caller to decode the old way.
//   - A request nobody subscribes to fails at once with a
//     *NoRespondersError naming the subject and the command to start,
//     instead of waiting for a timeout.
package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/relaystation/relay/internal/jsack"
)

// Error codes in the Nats-Service-Error-Code header, after HTTP statuses as
// micro's own endpoints and the `nats micro` tooling use them.
const (
	// CodeBadRequest: the request cannot be answered as sent; do not retry.
	CodeBadRequest = "400"
	// CodeInternal: the service failed to answer (for example a reply that
	// does not marshal).
	CodeInternal = "500"
	// CodeUnavailable: a store or server behind the service failed, or the
	// instance is stopping; another attempt may succeed.
	CodeUnavailable = "503"
)

// MetadataPrefix is the service metadata key holding the bus prefix, so
// discovery can tell apart relays (and test suites) sharing a NATS server.
const MetadataPrefix = "prefix"

// Error is an error a service answered with. It carries micro's error code
// and description (Nats-Service-Error-Code, Nats-Service-Error).
type Error struct {
	// Code is one of the Code constants (or another service's code).
	Code string
	// Message is the description.
	Message string
}

func (e *Error) Error() string { return e.Message + " (code " + e.Code + ")" }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Target names the service a client asks, for its errors.
type Target struct {
	// Service is what answers, as a reader calls it: "tool runner".
	Service string
	// Start is the command that runs it: "`relay toolrunner` or `relay serve`".
	Start string
	// Err is the sentinel a request nobody answered matches with errors.Is
	// (tools.ErrNoRunner); nats.ErrNoResponders matches too.
	Err error
}

// NoRespondersError is returned when no instance subscribes to the subject
// of a request: the worker is not running (or runs under another prefix).
type NoRespondersError struct {
	Subject string
	Target  Target
}

func (e *NoRespondersError) Error() string {
	return fmt.Sprintf("no %s answering on %s: is %s running?", e.Target.Service, e.Subject, e.Target.Start)
}

// Unwrap lets errors.Is match the target's sentinel and nats.ErrNoResponders.
func (e *NoRespondersError) Unwrap() []error {
	if e.Target.Err == nil {
		return []error{nats.ErrNoResponders}
	}
	return []error{e.Target.Err, nats.ErrNoResponders}
}

// Requester sends a NATS request; *nats.Conn is one.
type Requester interface {
	RequestWithContext(ctx context.Context, subj string, data []byte) (*nats.Msg, error)
}

// Call sends req as JSON to subject and returns the reply's body. A
// positive timeout bounds the request even when ctx's deadline is later (a
// reply lost when the connection dropped is never failed by nats.go); 0
// leaves it to ctx (a request that waits for a person). A reply carrying
// micro's error headers returns its body and an *Error; a reply from a relay
// before micro never carries them, so its body (with the error inside, the
// old way) is returned with a nil error for the caller to decode. No
// subscriber on subject is a *NoRespondersError, at once.
func Call(ctx context.Context, nc Requester, subject string, req any, timeout time.Duration, to Target) ([]byte, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = jsack.Bound(ctx, timeout)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, &NoRespondersError{Subject: subject, Target: to}
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("request %s: no reply from the %s in time: %w", subject, to.Service, err)
	case err != nil:
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	if e := ReplyError(msg); e != nil {
		return msg.Data, e
	}
	return msg.Data, nil
}

// ReplyError returns the *Error in a reply's micro error headers, or nil.
func ReplyError(msg *nats.Msg) *Error {
	if msg == nil || msg.Header == nil {
		return nil
	}
	desc, code := msg.Header.Get(micro.ErrorHeader), msg.Header.Get(micro.ErrorCodeHeader)
	if desc == "" && code == "" {
		return nil
	}
	if code == "" {
		code = CodeInternal
	}
	return &Error{Code: code, Message: desc}
}

// Handler answers one request: body is the reply's JSON body, sent whatever
// err is (it keeps the shape clients before micro decode, error included);
// a non-nil err also goes into micro's error headers, with its code when it
// is an *Error and CodeInternal otherwise. ctx ends at the server's timeout.
type Handler func(ctx context.Context, data []byte) (body any, err error)

// Endpoint is one request/reply endpoint of a Server.
type Endpoint struct {
	// Name is the micro endpoint name ("list").
	Name string
	// Subject is the absolute subject ("relay.rpc.tool.list").
	Subject string
	// Handle answers a request.
	Handle Handler
	// ErrorBody is the body sent with an error the service itself raises
	// (the instance is stopping, a reply does not marshal), in the shape the
	// endpoint's clients before micro decode. Required.
	ErrorBody func(*Error) any
	// Broadcast subscribes outside the queue group, so every instance
	// handles each request (an announcement such as "drop your caches");
	// a client's request gets the first instance's reply.
	Broadcast bool
}

// Config configures a Server.
type Config struct {
	// Name is the micro service name ("relay-toolrunner"). Required.
	Name string
	// Description is shown by $SRV.INFO.
	Description string
	// Prefix is the bus prefix, published as metadata "prefix".
	Prefix string
	// QueueGroup is the queue group every endpoint subscribes in. Required:
	// keep the name relays before micro used, so old and new instances
	// compete for one request instead of both answering it.
	QueueGroup string
	// Timeout bounds one request's handling. Default 10s.
	Timeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Server is a running micro service. Stop it once; it is safe for
// concurrent use.
type Server struct {
	cfg Config
	nc  *nats.Conn
	svc micro.Service
	log *slog.Logger
	ctx context.Context

	// mu is held for reading by every handler run and for writing by Stop,
	// so that once Stop returns no handler runs (the backend may be closed).
	mu      sync.RWMutex
	stopped bool
}

// Start adds the service on nc with its endpoints and returns once the
// server has them (when connected). The caller stops it with Stop. Handlers
// get a context derived from ctx without its cancellation (a request in
// flight is finished during shutdown), bounded by Timeout.
func Start(ctx context.Context, nc *nats.Conn, cfg Config, endpoints ...Endpoint) (*Server, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Name == "" || cfg.QueueGroup == "" {
		return nil, errors.New("rpc: a service needs a name and a queue group")
	}
	for _, ep := range endpoints {
		if ep.Handle == nil || ep.ErrorBody == nil {
			return nil, fmt.Errorf("rpc: endpoint %s needs a handler and an error body", ep.Name)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, nc: nc, log: log.With("service", cfg.Name), ctx: context.WithoutCancel(ctx)}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        cfg.Name,
		Version:     Version(),
		Description: cfg.Description,
		Metadata:    map[string]string{MetadataPrefix: cfg.Prefix},
		QueueGroup:  cfg.QueueGroup,
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			s.log.Warn("request/reply service error", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("add service %s: %w", cfg.Name, err)
	}
	s.svc = svc
	for _, ep := range endpoints {
		opts := []micro.EndpointOpt{micro.WithEndpointSubject(ep.Subject)}
		if ep.Broadcast {
			opts = append(opts, micro.WithEndpointQueueGroupDisabled())
		}
		if err := svc.AddEndpoint(ep.Name, s.handler(ep), opts...); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("add endpoint %s on %s: %w", ep.Name, ep.Subject, err)
		}
	}
	// Once Start returns the server holds the subscriptions, so a request
	// sent on another connection right after reaches this instance. Not
	// connected, they go out on reconnect: a failed flush is not an error.
	if nc.IsConnected() {
		_ = nc.FlushTimeout(cfg.Timeout)
	}
	return s, nil
}

// Info is the service's $SRV.INFO answer.
func (s *Server) Info() micro.Info { return s.svc.Info() }

// Stats is the service's $SRV.STATS answer.
func (s *Server) Stats() micro.Stats { return s.svc.Stats() }

// Stop drains the endpoints' subscriptions and waits for the requests being
// handled. A request already delivered to this instance but not yet handled
// is answered CodeUnavailable ("stopping"), so its client can ask again.
func (s *Server) Stop() error {
	err := s.svc.Stop()
	// The drain's unsubscribe reaches the server before this returns, so no
	// new request is routed here; then wait for the handlers in flight.
	if ferr := s.nc.Flush(); ferr != nil && !errors.Is(ferr, nats.ErrConnectionClosed) {
		s.log.Debug("flush after stopping the service", "err", ferr)
	}
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("stop service %s: %w", s.cfg.Name, err)
	}
	return nil
}

func (s *Server) handler(ep Endpoint) micro.Handler {
	log := s.log.With("endpoint", ep.Name)
	return micro.HandlerFunc(func(req micro.Request) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		if s.stopped {
			s.respond(req, log, ep, nil, Errorf(CodeUnavailable, "%s is stopping", s.cfg.Name))
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
		defer cancel()
		body, err := ep.Handle(ctx, req.Data())
		s.respond(req, log, ep, body, err)
	})
}

// respond sends body, and err in micro's headers. A nil body with an error
// is the endpoint's ErrorBody. A request without a reply subject is a
// notification (a broadcast nobody waits on): it gets no answer.
func (s *Server) respond(req micro.Request, log *slog.Logger, ep Endpoint, body any, err error) {
	if req.Reply() == "" {
		return
	}
	var e *Error
	if err != nil && !errors.As(err, &e) {
		e = &Error{Code: CodeInternal, Message: err.Error()}
	}
	if e != nil && body == nil {
		body = ep.ErrorBody(e)
	}
	data, merr := json.Marshal(body)
	if merr != nil {
		e = Errorf(CodeInternal, "reply does not marshal: %v", merr)
		data, _ = json.Marshal(ep.ErrorBody(e))
	}
	var rerr error
	if e != nil {
		rerr = req.Error(e.Code, oneLine(e.Message), data)
	} else {
		rerr = req.Respond(data)
	}
	if rerr != nil {
		log.Warn("reply not sent", "err", rerr)
	}
}

// oneLine keeps a header value on one line (a NATS header cannot hold a
// line break).
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if strings.ContainsAny(s, "\r\n") {
		s = strings.Join(strings.Fields(s), " ")
	}
	if s == "" {
		s = "error"
	}
	return s
}

// semver is the pattern semver.org suggests; micro requires a service
// version to match it.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Version is the service version micro publishes: the relay module's version
// from the build info without its "v" ("0.0.0-20261122-abcdef+dirty" for a
// build from a checkout), or "0.0.0" when the build has none.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := strings.TrimPrefix(bi.Main.Version, "v"); semver.MatchString(v) {
			return v
		}
	}
	return "0.0.0"
}
