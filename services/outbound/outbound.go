// Package outbound is the outbound worker (`relay outbound`): it consumes
// approved answers on out.> (durable consumer "outbound") and task notices on
// agent.notice (durable consumer "outbound-notice"), formats each for its
// destination and posts it: a Slack message (mrkdwn, Block Kit, split within
// Slack's limits), a GitHub issue or pull-request comment, a Sentry issue
// comment, an OpenProject work package comment, or a signed Standard Webhooks
// request.
//
// # Where and what
//
// The destination is meta.target (envelope.Target); the text is the
// envelope's content, Markdown, with [[ref:id]] citations rendered as links
// when a reference URL is configured. agent.notice envelopes go to Slack: to
// meta.target when it is a Slack target, else to the approval thread
// (meta.approval slack_channel/slack_ts), else to the Slack thread of
// meta.thread; a notice with none of these is acknowledged and logged.
//
// # Exactly one effect per idempotency key
//
// The key is meta.idempotency_key, or "out:" + the envelope id. Before
// posting, the worker claims the key in the JetStream key-value bucket
// "{prefix}_outbound" (an atomic create); when the post succeeded the record
// becomes "done" with the provider's id. So:
//
//   - a redelivery, or a second envelope with the same key (double publish),
//     finds "done" and is acknowledged without posting;
//   - a second envelope arriving while the first is being posted finds a
//     fresh claim and is retried after it;
//   - after a crash between the API call and the record (the claim is left
//     "pending"), or a failed attempt whose answer may have been lost, the
//     next delivery takes the claim over and the provider is asked first: GitHub, Sentry and OpenProject comments carry
//     a hidden marker <!-- relay:{key} --> that is searched for before
//     commenting; Slack messages carry the key in their message metadata,
//     searched in the thread (needs channels:history); a webhook carries the
//     key as its webhook-id for the receiver to de-duplicate.
//
// # Outcomes
//
// The clients' errors classify themselves (bus.Classified): a rate limit (429
// with Retry-After) is retried after that delay; network errors and 5xx are retried with the consumer's
// growing delays; a permanent failure (another 4xx, an invalid target, a
// destination without credentials) is dead-lettered, and when meta.approval
// names a Slack approval message a notice is posted in its thread
// ("Posting to GitHub octo/hello#7 failed: 404 Not Found"). The same happens
// when the retries run out.
package outbound

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/mappers/webhook"
)

// Subjects and meta keys this worker reads, relative to the bus prefix.
const (
	// SubjectOut is the root of answers to post: out.{github,slack,sentry,openproject,webhook}.
	SubjectOut = "out"
	// SubjectNotice carries task notices for humans, posted to Slack.
	SubjectNotice = "agent.notice"
	// MetaIdempotencyKey is the meta key of the side effect's key.
	MetaIdempotencyKey = "idempotency_key"
	// MetaApproval is the meta key of the approval record
	// {"id", "decided_by", "decided_at", "slack_channel", "slack_ts"}.
	MetaApproval = "approval"
	// WebhookEventType is the "type" of the generic webhook payload.
	WebhookEventType = "relay.message"
)

// Destinations: the target channels this worker posts to.
const (
	DestSlack       = string(envelope.ChannelSlack)
	DestGitHub      = string(envelope.ChannelGitHub)
	DestSentry      = string(envelope.ChannelSentry)
	DestOpenProject = string(envelope.ChannelOpenProject)
	DestWebhook     = envelope.TargetWebhook
)

// Config configures the worker. A destination whose client is nil is
// unconfigured: messages to it are dead-lettered with the reason in Missing.
type Config struct {
	// Slack posts Slack messages and the failure notices.
	Slack *slack.Poster
	// GitHub comments on issues and pull requests.
	GitHub *github.Commenter
	// Sentry comments on Sentry issues.
	Sentry *sentry.Commenter
	// OpenProject comments on work packages.
	OpenProject *openproject.Commenter
	// Webhook sends signed generic webhooks.
	Webhook *webhook.Sender
	// Missing says, per destination, what to set to configure it (for example
	// "GITHUB_TOKEN is not set"); it is the dead-letter reason of messages to
	// an unconfigured destination.
	Missing map[string]string
	// RefURL returns the URL of a cited reference [[ref:id]], or "". Nil
	// leaves citations as text.
	RefURL func(id string) string

	// Consumer is the durable consumer of out.>. Default "outbound".
	Consumer string
	// NoticeConsumer is the durable consumer of agent.notice. Default
	// "outbound-notice"; "-" disables notices.
	NoticeConsumer string
	// Concurrency is how many answers (out.>) this process posts at once,
	// and how many task notices besides. Default 4.
	Concurrency int
	// MaxDeliver is how many attempts a message gets. Default 8.
	MaxDeliver int
	// NakDelays are the delays between attempts after transient failures;
	// default the bus's (1s, 5s, 15s, 30s, 60s).
	NakDelays []time.Duration
	// HandlerTimeout bounds one attempt. Default 60s.
	HandlerTimeout time.Duration
	// ClaimLease is how long a claim by another message of the same key is
	// honoured before it is taken over (its worker is presumed dead).
	// Default 2m; it must exceed HandlerTimeout.
	ClaimLease time.Duration
	// RecordTTL is how long done records are kept. Default 30 days.
	RecordTTL time.Duration
	// Registerer records the metrics; nil keeps them private.
	Registerer prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	c.Consumer = cmp.Or(c.Consumer, "outbound")
	c.NoticeConsumer = cmp.Or(c.NoticeConsumer, "outbound-notice")
	c.Concurrency = config.Positive(c.Concurrency, 4)
	c.MaxDeliver = config.Positive(c.MaxDeliver, 8)
	c.HandlerTimeout = config.Positive(c.HandlerTimeout, 60*time.Second)
	c.ClaimLease = config.Positive(c.ClaimLease, 2*time.Minute)
	c.RecordTTL = config.Positive(c.RecordTTL, 30*24*time.Hour)
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports a configuration the worker cannot run with.
func (c *Config) Validate() error {
	if c.ClaimLease <= c.HandlerTimeout {
		return fmt.Errorf("outbound: claim lease %s must exceed the handler timeout %s", c.ClaimLease, c.HandlerTimeout)
	}
	return nil
}

// Bucket returns the key-value bucket of done and claimed keys for a bus prefix.
func Bucket(prefix string) string { return prefix + "_outbound" }

// Errors of messages that cannot be posted.
var (
	// ErrNoTarget: the envelope has no meta.target.
	ErrNoTarget = errors.New("no meta.target")
	// ErrUnconfigured: the destination has no credentials.
	ErrUnconfigured = errors.New("destination not configured")
	// ErrEmpty: the envelope has no content to post.
	ErrEmpty = errors.New("nothing to post: content is empty")
)

// Service is the outbound worker. Run it once per process.
type Service struct {
	cfg     Config
	bus     *bus.Bus
	kv      jetstream.KeyValue
	log     *slog.Logger
	id      string
	metrics *metrics

	slack       slackPoster
	github      githubCommenter
	sentry      sentryCommenter
	openproject openprojectCommenter
	webhook     webhookSender

	// afterPost, when set (tests), runs after a successful post and before the
	// record is written; an error leaves the claim pending, like a crash.
	afterPost func(key string) error
}

// The clients, as the worker uses them.
type (
	slackPoster interface {
		PostMarkdown(ctx context.Context, channel, markdown string, o slack.PostOptions) (slack.Posted, error)
		FindPosted(ctx context.Context, channel, threadTS, key string, since time.Time) (map[int]string, error)
	}
	githubCommenter interface {
		PostComment(ctx context.Context, owner, repo string, number int, body, key string, since time.Time) (github.Comment, error)
	}
	sentryCommenter interface {
		PostComment(ctx context.Context, issueID, text, key string) (sentry.Comment, error)
	}
	openprojectCommenter interface {
		PostComment(ctx context.Context, id int, markdown, key string) (openproject.Comment, error)
	}
	webhookSender interface {
		Send(ctx context.Context, url, id string, body []byte) (webhook.Delivery, error)
	}
)

// New opens the key-value bucket and returns the worker (not started).
func New(ctx context.Context, cfg Config, b *bus.Bus) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	s := &Service{cfg: cfg, bus: b, log: cfg.Logger, id: hex.EncodeToString(rnd[:])}
	if cfg.Slack != nil {
		s.slack = cfg.Slack
	}
	if cfg.GitHub != nil {
		s.github = cfg.GitHub
	}
	if cfg.Sentry != nil {
		s.sentry = cfg.Sentry
	}
	if cfg.OpenProject != nil {
		s.openproject = cfg.OpenProject
	}
	if cfg.Webhook != nil {
		s.webhook = cfg.Webhook
	}
	var err error
	s.metrics, err = newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s.kv, err = b.OpenBucket(ctx, Bucket(b.Prefix()), "relay outbound: idempotency keys claimed and done, with the provider's ids", cfg.RecordTTL)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{DestSlack, DestGitHub, DestSentry, DestOpenProject, DestWebhook} {
		if !s.configured(d) {
			s.log.Warn("destination not configured: messages to it are dead-lettered", "destination", d, "reason", s.missing(d))
		}
	}
	return s, nil
}

// Run consumes until ctx is cancelled, then drains in-flight posts.
func (s *Service) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	mw := []bus.Middleware{bus.Timeout(s.cfg.HandlerTimeout)}
	g.Go(func() error {
		return s.bus.Consume(gctx, s.consumer(s.cfg.Consumer, SubjectOut+".>"), bus.Chain(bus.HandlerFunc(s.handleOut), mw...))
	})
	if s.cfg.NoticeConsumer != "-" {
		g.Go(func() error {
			return s.bus.Consume(gctx, s.consumer(s.cfg.NoticeConsumer, SubjectNotice), bus.Chain(bus.HandlerFunc(s.handleNotice), mw...))
		})
	}
	return g.Wait()
}

func (s *Service) consumer(name, subject string) bus.ConsumerConfig {
	return bus.ConsumerConfig{
		Name:        name,
		Subject:     subject,
		MaxDeliver:  s.cfg.MaxDeliver,
		NakDelays:   s.cfg.NakDelays,
		Concurrency: s.cfg.Concurrency,
		// Heartbeats keep a long post; a dead worker's message comes back
		// (and takes its claim over) within 15 s.
		AckWait: 15 * time.Second,
	}
}

// IdempotencyKey is the key of e's side effect: meta.idempotency_key, or
// "out:" + the envelope id.
func IdempotencyKey(e *envelope.Envelope) string {
	if k := strings.TrimSpace(e.Meta.GetString(MetaIdempotencyKey)); k != "" {
		return k
	}
	return "out:" + e.ID
}

func (s *Service) handleOut(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	t, err := e.Meta.Target()
	if err == nil && t == nil {
		err = ErrNoTarget
	}
	if err != nil {
		err = fmt.Errorf("envelope %s on %s: %w", e.ID, m.Subject, err)
		s.metrics.failed.WithLabelValues("unknown", "permanent").Inc()
		s.notifyFailure(ctx, e, nil, err)
		return bus.Permanent(err)
	}
	return s.deliver(ctx, m, t, IdempotencyKey(e))
}

func (s *Service) handleNotice(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	t := noticeTarget(e)
	if t == nil {
		s.log.Info("notice has no Slack thread to go to; dropped", "envelope_id", e.ID, "thread", e.Meta.Thread)
		return nil
	}
	key := e.Meta.GetString(MetaIdempotencyKey)
	if key == "" {
		key = "notice:" + e.ID
	}
	return s.deliver(ctx, m, t, key)
}

// noticeTarget picks the Slack thread of a notice, or nil.
func noticeTarget(e *envelope.Envelope) *envelope.Target {
	if t, err := e.Meta.Target(); err == nil && t != nil && t.Channel == DestSlack {
		return t
	}
	if ch, ts := approvalThread(e); ch != "" {
		return &envelope.Target{Channel: DestSlack, SlackCh: ch, ThreadTS: ts}
	}
	if envelope.ThreadChannel(e.Meta.Thread) == envelope.ChannelSlack {
		parts := strings.SplitN(strings.TrimPrefix(e.Meta.Thread, "slack:"), "/", 3)
		if len(parts) == 3 && parts[1] != "" {
			ts := parts[2]
			if !looksLikeTS(ts) {
				ts = ""
			}
			return &envelope.Target{Channel: DestSlack, Team: parts[0], SlackCh: parts[1], ThreadTS: ts}
		}
	}
	return nil
}

func looksLikeTS(s string) bool {
	a, b, ok := strings.Cut(s, ".")
	return ok && a != "" && b != "" && strings.Trim(a+b, "0123456789") == ""
}

// approvalThread reads meta.approval's Slack message.
func approvalThread(e *envelope.Envelope) (channel, ts string) {
	var a struct {
		SlackChannel string `json:"slack_channel"`
		SlackTS      string `json:"slack_ts"`
	}
	if ok, err := e.Meta.Decode(MetaApproval, &a); !ok || err != nil {
		return "", ""
	}
	return a.SlackChannel, a.SlackTS
}

// deliver posts e to t once for key and maps the outcome.
func (s *Service) deliver(ctx context.Context, m *bus.Message, t *envelope.Target, key string) error {
	e := m.Envelope
	dest := t.Channel
	log := s.log.With("envelope_id", e.ID, "key", key, "target", t.String(), "delivered", m.Delivered)
	if !s.configured(dest) {
		err := fmt.Errorf("post %s to %s: %w", e.ID, t, &UnconfiguredError{Destination: dest, Missing: s.missing(dest)})
		s.metrics.failed.WithLabelValues(dest, "permanent").Inc()
		s.notifyFailure(ctx, e, t, err)
		return bus.Permanent(err)
	}
	if strings.TrimSpace(e.Content) == "" {
		err := fmt.Errorf("post %s to %s: %w", e.ID, t, ErrEmpty)
		s.metrics.failed.WithLabelValues(dest, "permanent").Inc()
		s.notifyFailure(ctx, e, t, err)
		return bus.Permanent(err)
	}
	cl, err := s.claim(ctx, key, m, t)
	if errors.Is(err, errDone) {
		s.metrics.duplicates.WithLabelValues(dest).Inc()
		log.Info("already posted; acknowledged without posting again", "provider_id", cl.rec.ProviderID)
		return nil
	}
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := s.post(ctx, t, e, key, cl)
	s.metrics.duration.WithLabelValues(dest).Observe(time.Since(start).Seconds())
	if err == nil && s.afterPost != nil {
		if herr := s.afterPost(key); herr != nil {
			return herr
		}
	}
	if err != nil {
		return s.failure(ctx, m, t, key, cl, err, log)
	}
	s.metrics.posted.WithLabelValues(dest).Inc() // before the done record, which tests wait for
	cl.rec.State, cl.rec.ProviderID, cl.rec.URL, cl.rec.DoneAt = stateDone, res.id, res.url, s.cfg.Now().UTC()
	if err := s.save(ctx, cl); err != nil {
		// Posted, not recorded: the redelivery finds the post at the provider.
		return fmt.Errorf("record %s done: %w", key, err)
	}
	took := time.Since(start)
	log.InfoContext(ctx, "posted", "provider_id", res.id, "url", res.url, "existing", res.existing, "took", took.Round(time.Millisecond).String())
	s.publishPosted(ctx, e, t, key, res, took)
	return nil
}

type result struct {
	id, url  string
	existing bool
}

// post formats e for t and calls the provider.
func (s *Service) post(ctx context.Context, t *envelope.Target, e *envelope.Envelope, key string, cl *claim) (result, error) {
	switch t.Channel {
	case DestSlack:
		return s.postSlack(ctx, t, e, key, cl)
	case DestGitHub:
		since := e.Timestamp.Add(-time.Hour)
		c, err := s.github.PostComment(ctx, t.Owner, t.Repo, t.Number, RenderRefs(e.Content, s.cfg.RefURL), key, since)
		return result{id: fmt.Sprint(c.ID), url: c.URL, existing: c.Existing}, err
	case DestSentry:
		c, err := s.sentry.PostComment(ctx, t.IssueID, RenderRefs(e.Content, s.cfg.RefURL), key)
		return result{id: c.ID, existing: c.Existing}, err
	case DestOpenProject:
		c, err := s.openproject.PostComment(ctx, t.WorkPackageID, RenderRefs(e.Content, s.cfg.RefURL), key)
		return result{id: fmt.Sprint(c.ID), url: c.URL, existing: c.Existing}, err
	case DestWebhook:
		raw, err := e.Marshal()
		if err != nil {
			return result{}, bus.Permanent(err)
		}
		body, err := json.Marshal(webhook.Payload{Type: WebhookEventType, Timestamp: e.Timestamp, Data: json.RawMessage(raw)})
		if err != nil {
			return result{}, bus.Permanent(err)
		}
		d, err := s.webhook.Send(ctx, t.URL, key, body)
		return result{id: fmt.Sprint(d.Status)}, err
	}
	return result{}, bus.Permanent(fmt.Errorf("target channel %q", t.Channel))
}

// postSlack posts the parts not yet posted and records each part's ts in the
// claim, so a retry resumes after the last one.
func (s *Service) postSlack(ctx context.Context, t *envelope.Target, e *envelope.Envelope, key string, cl *claim) (result, error) {
	if cl.resumed {
		// A previous attempt may have posted parts it never recorded.
		found, err := s.slack.FindPosted(ctx, t.SlackCh, t.ThreadTS, key, cl.since)
		if err != nil {
			s.log.Warn("cannot look for parts posted before a crash; posting the unrecorded parts again",
				"key", key, "recorded_parts", len(cl.rec.Parts), "err", err)
		}
		for len(found) > 0 {
			ts, ok := found[len(cl.rec.Parts)]
			if !ok {
				break
			}
			cl.rec.Parts = append(cl.rec.Parts, ts)
		}
	}
	posted, err := s.slack.PostMarkdown(ctx, t.SlackCh, e.Content, slack.PostOptions{
		ThreadTS: t.ThreadTS,
		Key:      key,
		Skip:     len(cl.rec.Parts),
		OnPart: func(i int, ts string) error {
			cl.rec.Parts = append(cl.rec.Parts, ts)
			if err := s.save(ctx, cl); err != nil {
				return fmt.Errorf("record part %d of %s: %w", i, key, err)
			}
			return nil
		},
	})
	if err != nil {
		return result{}, err
	}
	if len(cl.rec.Parts) == 0 {
		return result{}, bus.Permanent(ErrEmpty)
	}
	ch := posted.Channel
	if ch == "" {
		ch = t.SlackCh
	}
	return result{id: ch + "/" + cl.rec.Parts[0], existing: len(posted.TS) == 0}, nil
}

// The provider clients' errors classify themselves for the bus: a permanent
// failure is dead-lettered, a Retry-After is the redelivery delay.
var (
	_ bus.Classified = (*github.PostError)(nil)
	_ bus.Classified = (*slack.PostError)(nil)
	_ bus.Classified = (*mappers.APIError)(nil)
	_ bus.Classified = (*webhook.SendError)(nil)
)

// failure maps a failed post to its outcome.
func (s *Service) failure(ctx context.Context, m *bus.Message, t *envelope.Target, key string, cl *claim, err error, log *slog.Logger) error {
	dest := t.Channel
	err = fmt.Errorf("post %s to %s: %w", m.Envelope.ID, t, err)
	permanent, delay := bus.IsPermanent(err), bus.RetryDelay(err)
	last := m.Delivered >= uint64(s.cfg.MaxDeliver)
	switch {
	case permanent || last:
		s.metrics.failed.WithLabelValues(dest, "permanent").Inc()
		// Keep what was posted (Slack parts) but let a replay claim the key.
		cl.rec.State = stateFailed
		if serr := s.save(ctx, cl); serr != nil {
			log.Warn("cannot mark the claim failed; a replay waits for the claim lease", "err", serr)
		}
		s.notifyFailure(ctx, m.Envelope, t, err)
		if permanent {
			return err
		}
		return bus.Permanent(fmt.Errorf("giving up after %d attempts: %w", m.Delivered, err))
	}
	// The attempt ended cleanly: mark the claim so the retry knows exactly
	// which Slack parts were posted.
	cl.rec.State = stateFailed
	if serr := s.save(ctx, cl); serr != nil {
		log.Warn("cannot mark the claim failed; the retry will look for unrecorded posts", "err", serr)
	}
	if delay > 0 {
		s.metrics.failed.WithLabelValues(dest, "rate_limited").Inc()
		return err // the bus naks with the error's delay
	}
	s.metrics.failed.WithLabelValues(dest, "transient").Inc()
	return err
}

// notifyFailure posts "Posting to {target} failed: {reason}" in the Slack
// thread of the approval (meta.approval), when there is one and Slack is
// configured. Failing to notify is logged, not returned.
func (s *Service) notifyFailure(ctx context.Context, e *envelope.Envelope, t *envelope.Target, cause error) {
	ch, ts := approvalThread(e)
	if ch == "" || s.slack == nil {
		return
	}
	where := "the target"
	if t != nil {
		where = t.String()
	}
	text := fmt.Sprintf(":warning: Posting to %s failed: %s", where, Reason(cause))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if _, err := s.slack.PostMarkdown(ctx, ch, text, slack.PostOptions{ThreadTS: ts, Key: "failure:" + IdempotencyKey(e)}); err != nil {
		s.log.Warn("failure notice not posted", "envelope_id", e.ID, "slack_channel", ch, "err", err)
		return
	}
	s.metrics.notices.Inc()
}

// Reason is the short, human form of a post failure: "404 Not Found",
// "channel_not_found", "rate limited", or the error text.
func Reason(err error) string {
	var (
		ge *github.PostError
		se *slack.PostError
		ae *mappers.APIError
		we *webhook.SendError
	)
	status := func(code int, detail string) string {
		s := fmt.Sprintf("%d %s", code, http.StatusText(code))
		if detail != "" {
			s += " (" + detail + ")"
		}
		return s
	}
	switch {
	case errors.As(err, &ge) && ge.Status != 0:
		return status(ge.Status, "")
	case errors.As(err, &se) && se.Code != "":
		return se.Code
	case errors.As(err, &se) && se.Status != 0:
		return status(se.Status, "")
	case errors.As(err, &ae) && ae.Status != 0:
		return status(ae.Status, ae.Message)
	case errors.As(err, &we) && we.Status != 0:
		return status(we.Status, "")
	}
	var ue *UnconfiguredError
	if errors.As(err, &ue) {
		return ue.Error()
	}
	// Drop this worker's own "post {id} to {target}: " wrapping.
	for strings.HasPrefix(err.Error(), "post ") && errors.Unwrap(err) != nil {
		err = errors.Unwrap(err)
	}
	if p, ok := err.(*bus.PermanentError); ok {
		err = p.Err // the human needs the cause, not its class
	}
	return err.Error()
}

// UnconfiguredError is the failure of a message to a destination without
// credentials. It matches ErrUnconfigured.
type UnconfiguredError struct {
	// Destination is the target channel.
	Destination string
	// Missing says what to set.
	Missing string
}

func (e *UnconfiguredError) Error() string {
	return e.Destination + " is not configured: " + e.Missing
}

// Is makes errors.Is(err, ErrUnconfigured) true.
func (e *UnconfiguredError) Is(target error) bool { return target == ErrUnconfigured }

func (s *Service) configured(dest string) bool {
	switch dest {
	case DestSlack:
		return s.slack != nil
	case DestGitHub:
		return s.github != nil
	case DestSentry:
		return s.sentry != nil
	case DestOpenProject:
		return s.openproject != nil
	case DestWebhook:
		return s.webhook != nil
	}
	return false
}

func (s *Service) missing(dest string) string {
	if r := s.cfg.Missing[dest]; r != "" {
		return r
	}
	return "no " + dest + " client configured"
}

// The claim record kept in the bucket per idempotency key.
const (
	statePending = "pending"
	stateDone    = "done"
	stateFailed  = "failed"
)

// Record is the bucket's value for one idempotency key.
type Record struct {
	// Key is the idempotency key (bucket keys are its hash).
	Key string `json:"key"`
	// State is pending (claimed: posting, or its worker crashed), done, or
	// failed (the last attempt ended without posting everything; Parts are
	// exact).
	State string `json:"state"`
	// Target is where it goes, in short human form.
	Target string `json:"target"`
	// EnvelopeID and StreamSeq identify the message that claimed the key.
	EnvelopeID string `json:"envelope_id"`
	StreamSeq  uint64 `json:"stream_seq"`
	// Owner is the worker instance that claimed it, ClaimedAt when.
	Owner     string    `json:"owner"`
	ClaimedAt time.Time `json:"claimed_at"`
	// FirstClaimedAt is when the first attempt claimed the key.
	FirstClaimedAt time.Time `json:"first_claimed_at"`
	// Parts are the ts of the Slack messages posted so far.
	Parts []string `json:"parts,omitempty"`
	// ProviderID is the comment id, Slack "channel/ts" or webhook status.
	ProviderID string `json:"provider_id,omitempty"`
	// URL is the comment's URL, when the provider gives one.
	URL string `json:"url,omitempty"`
	// DoneAt is when the post succeeded.
	DoneAt time.Time `json:"done_at,omitzero"`
}

// BucketKey is the bucket key of an idempotency key: "k." + hex SHA-256 (the
// keys themselves may hold characters buckets do not allow).
func BucketKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "k." + hex.EncodeToString(sum[:20])
}

type claim struct {
	bkey    string
	rev     uint64
	rec     Record
	resumed bool      // an earlier attempt may have posted
	since   time.Time // when the earliest attempt may have posted
}

var errDone = errors.New("already done")

// errInProgress: another message holds a fresh claim on the key.
var errInProgress = errors.New("another delivery is posting the same idempotency key")

// claim takes the key for this delivery. It returns errDone (with the done
// record) when the key was already posted, a RetryAfter error while another
// delivery holds a fresh claim, and a claim otherwise (resumed when an
// earlier attempt may have posted).
func (s *Service) claim(ctx context.Context, key string, m *bus.Message, t *envelope.Target) (*claim, error) {
	now := s.cfg.Now().UTC()
	cl := &claim{bkey: BucketKey(key), rec: Record{
		Key: key, State: statePending, Target: t.String(), EnvelopeID: m.Envelope.ID, StreamSeq: m.StreamSeq,
		Owner: s.id, ClaimedAt: now, FirstClaimedAt: now,
	}}
	for attempt := 0; attempt < 3; attempt++ {
		data, _ := json.Marshal(cl.rec)
		rev, err := s.kv.Create(ctx, cl.bkey, data)
		if err == nil {
			cl.rev = rev
			return cl, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("claim %s: %w", key, err)
		}
		entry, err := s.kv.Get(ctx, cl.bkey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted in between: create again
		}
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", key, err)
		}
		var old Record
		if err := json.Unmarshal(entry.Value(), &old); err != nil {
			old = Record{State: stateFailed} // unreadable: take it over
		}
		switch {
		case old.State == stateDone:
			return &claim{rec: old}, errDone
		case old.State == statePending && old.StreamSeq != m.StreamSeq && now.Sub(old.ClaimedAt) < s.cfg.ClaimLease:
			// The holder usually finishes within a second; back off from
			// 500ms, doubling, so the retries outlast a slow holder (a
			// handler timeout) but never the lease.
			wait := min(s.cfg.ClaimLease-now.Sub(old.ClaimedAt)+100*time.Millisecond, 500*time.Millisecond<<min(m.Delivered-1, 10))
			return nil, bus.RetryAfter(fmt.Errorf("claim %s: %w (envelope %s)", key, errInProgress, old.EnvelopeID), wait)
		}
		// A failed attempt, our own earlier delivery (crashed), or a stale
		// claim: take it over, keeping the parts already posted. After a
		// crash (still pending), and after a failure whose answer was lost
		// (a reset or a timeout once the request was sent), the provider may
		// hold unrecorded posts: the take-over looks for them.
		cl.rec.Parts = old.Parts
		first := old.FirstClaimedAt
		if first.IsZero() {
			first = old.ClaimedAt
		}
		if !first.IsZero() {
			cl.rec.FirstClaimedAt = first
		}
		data, _ = json.Marshal(cl.rec)
		rev, err = s.kv.Update(ctx, cl.bkey, data, entry.Revision())
		if err != nil {
			continue // someone else moved first: look again
		}
		cl.rev, cl.resumed = rev, true
		cl.since = first.Add(-time.Minute)
		if first.IsZero() {
			cl.since = m.Envelope.Timestamp.Add(-time.Hour)
		}
		return cl, nil
	}
	return nil, bus.RetryAfter(fmt.Errorf("claim %s: contended", key), time.Second)
}

// save writes the claim's record if nobody took the claim over meanwhile.
func (s *Service) save(ctx context.Context, cl *claim) error {
	data, err := json.Marshal(cl.rec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rev, err := s.kv.Update(ctx, cl.bkey, data, cl.rev)
	if err != nil {
		return fmt.Errorf("update %s: %w", cl.rec.Key, err)
	}
	cl.rev = rev
	return nil
}

// Lookup returns the record of an idempotency key, or nil when there is none.
func (s *Service) Lookup(ctx context.Context, key string) (*Record, error) {
	entry, err := s.kv.Get(ctx, BucketKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(entry.Value(), &r); err != nil {
		return nil, fmt.Errorf("record %s: %w", key, err)
	}
	return &r, nil
}
