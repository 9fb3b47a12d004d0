package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/mappers"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
)

// SocketConfig configures the Socket Mode bridge.
type SocketConfig struct {
	// AppToken is the app-level token (SLACK_APP_TOKEN, "xapp-…") with the
	// connections:write scope. Required.
	AppToken secret.Value
	// BotToken is the bot token (SLACK_BOT_TOKEN); optional here.
	BotToken secret.Value
	// APIURL is the Slack Web API base (SLACK_API_URL). Default "https://slack.com/api/".
	APIURL string
	// PingInterval is how long the connection may go without a ping from Slack
	// before it is reopened. Default 30s.
	PingInterval time.Duration
	// Concurrency bounds requests published at once. Default 8.
	Concurrency int
	// Now is the clock stamped on envelopes as their receive time; nil means time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
}

// ErrAppToken marks an app token that is missing or not an xapp- token.
var ErrAppToken = errors.New("socket mode needs an app-level token (xapp-…)")

// publisher is what the bridge needs of the bus.
type publisher interface {
	Publish(ctx context.Context, subject string, e *envelope.Envelope, opts ...bus.PublishOption) (bus.PublishResult, error)
}

// SocketMode receives Slack events, slash commands and interactions over a
// Socket Mode WebSocket (no public webhook URL needed) and publishes them
// exactly as the webhook gateway would: mapped by mappers/slack, on the same
// subjects, with the same Nats-Msg-Id. Each request is acknowledged to Slack
// once its envelopes are stored; one that cannot be stored is not
// acknowledged, so Slack delivers it again.
type SocketMode struct {
	cfg      SocketConfig
	log      *slog.Logger
	pub      publisher
	provider *slackmapper.Provider
	client   *socketmode.Client
}

// NewSocketMode returns the bridge (not connected); Run connects it.
func NewSocketMode(cfg SocketConfig, pub publisher) (*SocketMode, error) {
	if !strings.HasPrefix(cfg.AppToken.Reveal(), "xapp-") {
		return nil, ErrAppToken
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	if !strings.HasSuffix(cfg.APIURL, "/") {
		cfg.APIURL += "/"
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 30 * time.Second
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	api := slack.New(cfg.BotToken.Reveal(), slack.OptionAppLevelToken(cfg.AppToken.Reveal()), slack.OptionAPIURL(cfg.APIURL),
		slack.OptionHTTPClient(telemetry.HTTPClient(30*time.Second)))
	client := socketmode.New(api,
		socketmode.OptionPingInterval(cfg.PingInterval),
		socketmode.OptionLog(slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)))
	return &SocketMode{
		cfg: cfg, log: cfg.Logger, pub: pub, client: client,
		provider: slackmapper.New(slackmapper.Config{Now: cfg.Now}),
	}, nil
}

// Run holds the connection (reconnecting when Slack asks or it drops) and
// relays requests until ctx is cancelled; then it finishes in-flight requests
// and returns nil. It returns an error when Slack refuses the token.
func (s *SocketMode) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- s.client.RunContext(ctx) }()
	sem := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			select {
			case <-runErr:
			case <-time.After(5 * time.Second):
				s.log.Warn("slack socket mode did not close within 5s")
			}
			return nil
		case err := <-runErr:
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("slack socket mode: %w", err)
		case evt := <-s.client.Events:
			switch evt.Type {
			case socketmode.EventTypeEventsAPI, socketmode.EventTypeInteractive, socketmode.EventTypeSlashCommand:
				if evt.Request == nil {
					continue
				}
				req := *evt.Request
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					continue
				}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					s.relay(ctx, evt.Type, &req)
				}()
			case socketmode.EventTypeConnected:
				s.log.Info("slack socket mode connected")
			case socketmode.EventTypeConnectionError, socketmode.EventTypeIncomingError, socketmode.EventTypeErrorBadMessage, socketmode.EventTypeErrorWriteFailed:
				s.log.Warn("slack socket mode", "event", string(evt.Type), "detail", fmt.Sprint(evt.Data))
			case socketmode.EventTypeInvalidAuth:
				s.log.Error("slack socket mode: the app token was refused")
			default:
				s.log.Debug("slack socket mode", "event", string(evt.Type))
			}
		}
	}
}

// relay maps one Socket Mode request, publishes its envelopes and acknowledges it.
func (s *SocketMode) relay(ctx context.Context, typ socketmode.EventType, req *socketmode.Request) {
	log := s.log.With("socket_envelope_id", req.EnvelopeID, "type", string(typ))
	r, err := socketRequest(typ, req, s.cfg.Now())
	if err == nil {
		var res mappers.Result
		res, err = s.provider.Map(r)
		if err == nil {
			for _, it := range res.Items {
				if _, perr := s.pub.Publish(ctx, it.Subject, it.Envelope, bus.WithMsgID(it.MsgID)); perr != nil {
					// Not acknowledged: Slack delivers the request again.
					log.Warn("socket mode request not stored; Slack will retry", "subject", it.Subject, "err", perr)
					return
				}
			}
			log.Debug("socket mode request relayed", "envelopes", len(res.Items))
		}
	}
	if err != nil {
		// A request that cannot be mapped will not map on retry either.
		log.Warn("socket mode request dropped: cannot be mapped", "err", err)
	}
	if err := s.client.AckCtx(ctx, req.EnvelopeID, nil); err != nil {
		log.Warn("socket mode ack failed", "err", err)
	}
}

// socketRequest rebuilds the webhook request a Socket Mode request stands for,
// so the Slack mapper reads it exactly as it reads webhooks.
func socketRequest(typ socketmode.EventType, req *socketmode.Request, now time.Time) (*mappers.Request, error) {
	r := &mappers.Request{Header: http.Header{}, Received: now}
	switch typ {
	case socketmode.EventTypeEventsAPI:
		r.Route, r.Body = slackmapper.RouteEvents, req.Payload
		if req.RetryAttempt > 0 {
			r.Header.Set("X-Slack-Retry-Num", strconv.Itoa(req.RetryAttempt))
			r.Header.Set("X-Slack-Retry-Reason", req.RetryReason)
		}
	case socketmode.EventTypeInteractive:
		r.Route = slackmapper.RouteInteractions
		r.Body = []byte(url.Values{"payload": {string(req.Payload)}}.Encode())
	case socketmode.EventTypeSlashCommand:
		var fields map[string]any
		if err := json.Unmarshal(req.Payload, &fields); err != nil {
			return nil, fmt.Errorf("slash command payload: %w", err)
		}
		form := url.Values{}
		for k, v := range fields {
			switch x := v.(type) {
			case string:
				form.Set(k, x)
			case nil:
			default:
				form.Set(k, fmt.Sprint(x))
			}
		}
		r.Route, r.Body = slackmapper.RouteCommands, []byte(form.Encode())
	default:
		return nil, fmt.Errorf("socket mode request type %q is not relayed", typ)
	}
	return r, nil
}
