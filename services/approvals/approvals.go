package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/telemetry"
	slackmapper "github.com/relaystation/relay/mappers/slack"
)

// Subjects this worker consumes and publishes, relative to the bus prefix.
const (
	// SubjectSuggestion carries the agent's drafted answers.
	SubjectSuggestion = "agent.suggestion"
	// SubjectBlockActions and SubjectViewSubmission carry Slack interactions.
	SubjectBlockActions   = "in.slack.block_actions"
	SubjectViewSubmission = "in.slack.view_submission"
	// SubjectDecided carries one system envelope per decision (meta.approval).
	SubjectDecided = "approval.decided"
	// SubjectAudit carries audit records (meta.audit): decisions, edits,
	// refusals and expiries.
	SubjectAudit = envelope.SubjectAudit + ".approvals"
	// SubjectOutPrefix is followed by the target channel: out.github, out.slack, ...
	SubjectOutPrefix = "out."
)

// Meta keys this worker writes.
const (
	MetaApproval       = "approval"
	MetaIdempotencyKey = "idempotency_key"
	MetaAudit          = "audit"
)

// Errors of a suggestion the worker cannot put up for approval; the message
// is dead-lettered with them.
var (
	ErrNoTarget        = errors.New("suggestion has no meta.target")
	ErrEmptySuggestion = errors.New("suggestion has no content")
)

// SlackAPI is the part of the Slack Web API the worker calls; *slack.Client
// implements it.
type SlackAPI interface {
	PostMessageContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
	UpdateMessageContext(ctx context.Context, channelID, timestamp string, options ...slack.MsgOption) (string, string, string, error)
	PostEphemeralContext(ctx context.Context, channelID, userID string, options ...slack.MsgOption) (string, error)
	OpenViewContext(ctx context.Context, triggerID string, view slack.ModalViewRequest) (*slack.ViewResponse, error)
	GetUserGroupMembersContext(ctx context.Context, userGroup string, options ...slack.GetUserGroupMembersOption) ([]string, error)
	GetConversationHistoryContext(ctx context.Context, params *slack.GetConversationHistoryParameters) (*slack.GetConversationHistoryResponse, error)
	GetConversationRepliesContext(ctx context.Context, params *slack.GetConversationRepliesParameters) ([]slack.Message, bool, string, error)
}

// Service is the approvals worker. Run it once; its methods are safe for
// concurrent use.
type Service struct {
	cfg       Config
	log       *slog.Logger
	bus       *bus.Bus
	api       SlackAPI
	store     *store
	approvers *approvers
	questions *questions // elicitation (elicit.go)
}

// New opens the approvals bucket and returns the worker (not started). api is
// the Slack client; nil builds one from cfg.BotToken and cfg.APIURL, or, when
// cfg.ConsoleOnly, leaves the worker without Slack: suggestions are kept
// pending for the console (rpc.approvals.*), and Slack interactions and
// questions of MCP servers are not handled.
func New(ctx context.Context, cfg Config, b *bus.Bus, api SlackAPI) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if api == nil && !cfg.ConsoleOnly() {
		api = slack.New(cfg.BotToken.Reveal(), slack.OptionAPIURL(cfg.APIURL), slack.OptionHTTPClient(telemetry.HTTPClient(30*time.Second)))
	}
	st, err := openStore(ctx, b, cfg.Retention)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: cfg.Logger, bus: b, api: api, store: st}
	if s.questions, err = openQuestions(ctx, b, cfg.Retention); err != nil {
		return nil, err
	}
	s.approvers = newApprovers(cfg.Approvers, api, cfg.GroupCacheTTL, cfg.Now, cfg.Logger)
	if api == nil {
		s.log.Info("approvals without Slack: suggestions wait for a decision in the operator console (relay console)")
	} else if len(cfg.Approvers) == 0 {
		s.log.Warn("no approvers configured (SLACK_APPROVERS): every decision is refused")
	}
	return s, nil
}

// Run consumes suggestions and interactions and sweeps expired approvals
// until ctx is cancelled; then it drains in-flight work and returns.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopRPC, err := s.serveRPC(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = stopRPC() }()
	consumers := []struct {
		cfg bus.ConsumerConfig
		h   bus.HandlerFunc
	}{
		{bus.ConsumerConfig{Name: s.cfg.Consumer, Subject: SubjectSuggestion, Concurrency: s.cfg.Concurrency, AckWait: ackWait}, s.HandleSuggestion},
		{bus.ConsumerConfig{Name: s.cfg.Consumer + "-steps", Subject: SubjectToolStep, Concurrency: s.cfg.Concurrency, AckWait: ackWait}, s.HandleToolStep},
	}
	if s.api != nil {
		consumers = append(consumers, []struct {
			cfg bus.ConsumerConfig
			h   bus.HandlerFunc
		}{
			{bus.ConsumerConfig{Name: s.cfg.Consumer + "-actions", Subject: SubjectBlockActions, Concurrency: s.cfg.Concurrency, AckWait: ackWait}, s.HandleBlockActions},
			{bus.ConsumerConfig{Name: s.cfg.Consumer + "-views", Subject: SubjectViewSubmission, Concurrency: s.cfg.Concurrency, AckWait: ackWait}, s.HandleViewSubmission},
			{bus.ConsumerConfig{Name: s.cfg.Consumer + "-commands", Subject: SubjectCommands, Concurrency: s.cfg.Concurrency, AckWait: ackWait, DeliverNew: true}, s.HandleCommand},
		}...)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(consumers))
	for i, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.bus.Consume(ctx, c.cfg, bus.Chain(c.h, bus.Timeout(time.Minute))); err != nil {
				errs[i] = err
				cancel()
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); s.sweepLoop(ctx) }()
	wg.Wait()
	return errors.Join(errs...)
}

// ackWait is the consumers' ack wait: handlers heartbeat every third of it,
// so a dead worker's message (a click) is handled by another within 15 s.
const ackWait = 15 * time.Second

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// HandleSuggestion handles one agent.suggestion envelope: Slack-local answers
// go to out.slack; others get (or update) their approval message.
func (s *Service) HandleSuggestion(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	target, err := e.Meta.Target()
	if err != nil {
		return bus.Permanent(fmt.Errorf("suggestion %s: %w", e.ID, err))
	}
	if target == nil {
		return bus.Permanent(fmt.Errorf("suggestion %s: %w", e.ID, ErrNoTarget))
	}
	task := e.Meta.TaskID
	if task == "" {
		task = e.ID
	}
	log := s.log.With("envelope_id", e.ID, "task_id", task, "thread", e.Meta.Thread, "target", target.String())
	if !target.NeedsApproval() {
		out := outEnvelope(e, e.Content, target, "out:"+task, nil)
		if _, err := s.bus.Publish(ctx, SubjectOutPrefix+target.Channel, out, bus.WithMsgID("direct:"+task)); err != nil {
			return err
		}
		log.Info("slack-local suggestion forwarded without approval", "out_id", out.ID)
		return nil
	}
	if strings.TrimSpace(e.Content) == "" {
		return bus.Permanent(fmt.Errorf("suggestion %s: %w", e.ID, ErrEmptySuggestion))
	}
	now := s.now()
	traceparent := m.Header.Get("traceparent") // the approved answer continues the suggestion's trace
	var busy bool
	rec, err := s.store.mutate(ctx, task, func(r *Record) (*Record, error) {
		busy = false
		switch {
		case r == nil:
			rec := &Record{
				TaskID: task, Round: 1, Status: StatusPending, Text: e.Content, Suggestion: json.RawMessage(m.Data),
				SuggestionIDs: []string{e.ID}, Target: *target, SlackChannel: s.cfg.channelFor(target.Channel),
				CreatedAt: now, ExpiresAt: now.Add(s.cfg.TTL), TraceParent: traceparent,
			}
			// A tool step of the task opened its approval thread: the
			// answer goes there too (toolstep.go).
			a, err := s.anchorOf(ctx, task)
			if err != nil {
				return nil, err
			}
			if a != nil && a.Channel == rec.SlackChannel {
				rec.ThreadTS = a.ThreadTS
			}
			return rec, nil
		case r.seen(e.ID):
			return nil, errNoChange
		case r.Status == StatusPending:
			// A newer draft of the same task replaces the pending one in place.
			r.Text, r.Suggestion, r.Target, r.TraceParent = e.Content, json.RawMessage(m.Data), *target, traceparent
			r.EditedBy, r.Shown = "", false
			r.ExpiresAt = now.Add(s.cfg.TTL)
			r.remember(e.ID)
			return r, nil
		case !r.settled():
			busy = true // the previous round is still being finished
			return nil, errNoChange
		}
		// A new round in the same thread.
		next := &Record{
			TaskID: task, Round: r.Round + 1, Status: StatusPending, Text: e.Content, Suggestion: json.RawMessage(m.Data),
			SuggestionIDs: r.SuggestionIDs, Target: *target, SlackChannel: r.SlackChannel, ThreadTS: r.ThreadTS,
			CreatedAt: now, ExpiresAt: now.Add(s.cfg.TTL), TraceParent: traceparent,
		}
		next.remember(e.ID)
		return next, nil
	})
	if err != nil {
		return err
	}
	if busy {
		return bus.RetryAfter(fmt.Errorf("task %s: previous round %d is still being finished", task, rec.Round), 2*time.Second)
	}
	if err := s.show(ctx, rec); err != nil {
		return err
	}
	log.Info("suggestion awaiting approval", "round", rec.Round, "slack_channel", rec.SlackChannel)
	return nil
}

// settled reports whether everything a decided round needs was done.
func (r *Record) settled() bool {
	if r.Status == StatusPending {
		return false
	}
	// A tool step's every outcome is published (the call, or its refusal).
	return r.Shown && r.Announced && (r.Status != StatusApproved && r.Step == nil || r.Published)
}

// show posts the round's message when it was not posted yet, or updates it
// to the record's state when it does not show it.
func (s *Service) show(ctx context.Context, rec *Record) error {
	if rec == nil || rec.Shown && (rec.SlackTS != "" || s.api == nil) {
		return nil
	}
	if s.api == nil {
		return s.markShown(ctx, rec) // the console reads the record itself
	}
	blocks, fallback := message(rec, s.cfg.RefURL)
	if rec.Step != nil {
		blocks, fallback = stepMessage(rec)
	}
	opts := []slack.MsgOption{slack.MsgOptionBlocks(blocks...), slack.MsgOptionText(fallback, false)}
	if rec.SlackTS == "" {
		return s.post(ctx, rec, opts)
	}
	if _, _, _, err := s.api.UpdateMessageContext(ctx, rec.SlackChannel, rec.SlackTS, opts...); err != nil {
		err = fmt.Errorf("update approval message %s/%s of task %s: %w", rec.SlackChannel, rec.SlackTS, rec.TaskID, slackmapper.Classify("chat.update", err))
		if !bus.IsPermanent(err) {
			return err
		}
		s.log.Warn("approval message cannot be updated; giving up on it", "task_id", rec.TaskID, "err", err)
	}
	return s.markShown(ctx, rec)
}

// markShown records that rec's state is shown, unless the record changed.
func (s *Service) markShown(ctx context.Context, rec *Record) error {
	_, err := s.store.mutate(ctx, rec.TaskID, func(r *Record) (*Record, error) {
		if r == nil || r.Round != rec.Round || r.Shown || r.Text != rec.Text || r.Status != rec.Status || r.SlackTS != rec.SlackTS {
			return nil, errNoChange
		}
		r.Shown = true
		return r, nil
	})
	return err
}

// post posts the round's message exactly once. The right to post is
// claimed in the record first (Posting, until PostingUntil), so two handlers
// of one round never both post; one that finds a live claim is retried after
// it, and the claimer shows whatever changed meanwhile once it has recorded
// the message's ts. A claim left by a poster that crashed between posting and
// recording expires; whoever takes it over first looks in Slack for the
// message (its metadata carries the round's approval id) and posts only when
// it is not there.
func (s *Service) post(ctx context.Context, rec *Record, opts []slack.MsgOption) error {
	token := uuid.NewString()
	now := s.cfg.Now()
	c, err := s.claimPost(ctx, rec, token, now)
	if err != nil {
		return err
	}
	switch {
	case !c.busyUntil.IsZero():
		return bus.RetryAfter(fmt.Errorf("task %s round %d: %w", rec.TaskID, rec.Round, ErrPosting), c.busyUntil.Sub(now)+100*time.Millisecond)
	case c.rec == nil || c.rec.Posting != token:
		// Posted by someone else meanwhile (or the round moved on).
		if c.rec != nil && c.rec.Round == rec.Round && !c.rec.Shown && c.rec.SlackTS != "" {
			return s.show(ctx, c.rec)
		}
		return nil
	}
	ts, found, err := s.findOrPost(ctx, c.rec, token, c.resumed, opts)
	if err != nil {
		return err
	}
	// opts show rec as show rendered it; what the message in Slack shows is
	// known only when this handler posted it.
	return s.recordPosted(ctx, c.rec, rec, ts, found)
}

// claim is what claimPost found: the record as claimed (nil or with
// another Posting token when the claim was not taken), when a live claim of
// another handler expires (zero when there was none), and whether this claim
// took over an expired one.
type claim struct {
	rec       *Record
	busyUntil time.Time
	resumed   bool
}

// claimPost claims the right to post rec's round for token until
// now+postClaim, unless the round moved on, is posted already or has a
// live claim.
func (s *Service) claimPost(ctx context.Context, rec *Record, token string, now time.Time) (claim, error) {
	var c claim
	claimed, err := s.store.mutate(ctx, rec.TaskID, func(r *Record) (*Record, error) {
		c.busyUntil, c.resumed = time.Time{}, false
		if r == nil || r.Round != rec.Round || r.SlackTS != "" {
			return nil, errNoChange
		}
		if r.Posting != "" && now.Before(r.PostingUntil) {
			c.busyUntil = r.PostingUntil
			return nil, errNoChange
		}
		c.resumed = r.Posting != ""
		r.Posting, r.PostingUntil = token, now.Add(postClaim)
		return r, nil
	})
	c.rec = claimed
	return c, err
}

// findOrPost returns the ts of the round's message: when the claim was
// resumed, the one a crashed claimer may have posted without recording it
// (found); otherwise, or when there is none, the one it posts with opts. A
// failed post gives the claim up (at once when Slack did not post).
func (s *Service) findOrPost(ctx context.Context, rec *Record, token string, resumed bool, opts []slack.MsgOption) (ts string, found bool, err error) {
	if resumed {
		foundTS, err := s.findPosted(ctx, rec)
		if err != nil {
			s.log.Warn("cannot look for an approval message posted before a crash; posting it", "task_id", rec.TaskID, "round", rec.Round, "err", err)
		}
		if foundTS != "" {
			return foundTS, true, nil
		}
	}
	if rec.ThreadTS != "" {
		opts = append(opts, slack.MsgOptionTS(rec.ThreadTS))
	}
	opts = append(opts, slack.MsgOptionMetadata(slack.SlackMetadata{
		EventType: MetadataEventType, EventPayload: map[string]any{"approval_id": rec.ApprovalID()},
	}))
	pctx, cancel := context.WithTimeout(ctx, postClaim/2)
	_, ts, err = s.api.PostMessageContext(pctx, rec.SlackChannel, opts...)
	cancel()
	if err != nil {
		s.unclaim(rec, token, notPosted(err))
		return "", false, fmt.Errorf("post approval message of task %s to %s: %w", rec.TaskID, rec.SlackChannel, slackmapper.Classify("chat.postMessage", err))
	}
	return ts, false, nil
}

// recordPosted records ts as the round's message and releases the claim,
// then shows the record if it changed since rendered was shown (or the
// message was found, not posted).
func (s *Service) recordPosted(ctx context.Context, rec, rendered *Record, ts string, found bool) error {
	_, err := s.store.mutate(ctx, rec.TaskID, func(r *Record) (*Record, error) {
		if r == nil || r.Round != rec.Round || r.SlackTS != "" {
			return nil, errNoChange
		}
		r.SlackTS, r.Posting, r.PostingUntil = ts, "", time.Time{}
		if r.ThreadTS == "" {
			r.ThreadTS = ts
		}
		// A message found after a crash shows what the crashed poster
		// rendered: update it. One this handler posted shows rendered.
		r.Shown = !found && r.Text == rendered.Text && r.Status == rendered.Status
		return r, nil
	})
	if err != nil {
		// Posted, not recorded: the claim expires and the redelivery finds
		// the message in Slack.
		return err
	}
	cur, _, err := s.store.get(ctx, rec.TaskID)
	if err == nil && !cur.Shown && cur.Round == rec.Round && cur.SlackTS != "" {
		return s.show(ctx, cur) // it changed while we posted
	}
	return nil
}

// MetadataEventType is the Slack message metadata event type of approval
// messages; its payload is {"approval_id": Record.ApprovalID()}.
const MetadataEventType = "relay_approval"

// ErrPosting means another handler is posting the round's message.
var ErrPosting = errors.New("approval message is being posted")

// postClaim is how long a claim to post a round's message lasts; the post
// itself is bounded to half of it.
const postClaim = 10 * time.Second

// unclaim ends a claim whose post failed. When Slack said no, nothing was
// posted and the claim is dropped; when the answer was lost (a reset, a
// timeout) the message may exist, so the claim is left expired: whoever
// takes it over looks for the message first.
func (s *Service) unclaim(rec *Record, token string, drop bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now := s.cfg.Now()
	_, _ = s.store.mutate(ctx, rec.TaskID, func(r *Record) (*Record, error) {
		if r == nil || r.Posting != token {
			return nil, errNoChange
		}
		if drop {
			r.Posting, r.PostingUntil = "", time.Time{}
		} else {
			r.PostingUntil = now
		}
		return r, nil
	})
}

// notPosted reports a post error that says Slack did not post: an error
// response or a rate limit, not a lost answer.
func notPosted(err error) bool {
	var (
		se slack.SlackErrorResponse
		rl *slack.RateLimitedError
	)
	return errors.As(err, &se) || errors.As(err, &rl)
}

// findPosted looks for the round's message in its thread (or, for the first
// round, the channel's recent history) by its metadata and returns its ts, or
// "". It needs the channels:history scope.
func (s *Service) findPosted(ctx context.Context, rec *Record) (string, error) {
	match := func(msgs []slack.Message) string {
		for _, m := range msgs {
			if m.Metadata.EventType == MetadataEventType && fmt.Sprint(m.Metadata.EventPayload["approval_id"]) == rec.ApprovalID() {
				return m.Timestamp
			}
		}
		return ""
	}
	oldest := strconv.FormatInt(rec.CreatedAt.Add(-time.Minute).Unix(), 10) + ".000000"
	cursor := ""
	for range 20 {
		var (
			msgs []slack.Message
			more bool
			next string
		)
		if rec.ThreadTS != "" {
			var err error
			msgs, more, next, err = s.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
				ChannelID: rec.SlackChannel, Timestamp: rec.ThreadTS, Cursor: cursor, Oldest: oldest, Limit: 200, IncludeAllMetadata: true,
			})
			if err != nil {
				return "", fmt.Errorf("conversations.replies %s/%s: %w", rec.SlackChannel, rec.ThreadTS, err)
			}
		} else {
			h, err := s.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
				ChannelID: rec.SlackChannel, Cursor: cursor, Oldest: oldest, Limit: 200, IncludeAllMetadata: true,
			})
			if err != nil {
				return "", fmt.Errorf("conversations.history %s: %w", rec.SlackChannel, err)
			}
			msgs, more, next = h.Messages, h.HasMore, h.ResponseMetaData.NextCursor
		}
		if ts := match(msgs); ts != "" {
			return ts, nil
		}
		if !more || next == "" {
			return "", nil
		}
		cursor = next
	}
	return "", nil
}

// outEnvelope builds the envelope posted to out.{channel}: the suggestion's
// thread, task, source, context, refs and meta, with text as content.
func outEnvelope(sugg *envelope.Envelope, text string, target *envelope.Target, idemKey string, approval map[string]any) *envelope.Envelope {
	ch := envelope.Channel(target.Channel)
	switch ch {
	case envelope.ChannelGitHub, envelope.ChannelSlack, envelope.ChannelSentry, envelope.ChannelOpenProject:
	default:
		ch = envelope.ChannelInternal
	}
	out := envelope.New(ch, envelope.RoleAssistant, text)
	out.Meta.Thread = sugg.Meta.Thread
	out.Meta.TaskID = sugg.Meta.TaskID
	if sugg.Meta.Source != nil {
		src := *sugg.Meta.Source
		out.Meta.Source = &src
	}
	if sugg.Context != nil {
		c := *sugg.Context
		out.Context = &c
	}
	out.RetrievalRefs = append([]string(nil), sugg.RetrievalRefs...)
	if len(sugg.Meta.Extra) > 0 {
		out.Meta.Extra = maps.Clone(sugg.Meta.Extra)
	}
	out.Meta.SetTarget(target)
	out.Meta.Set(MetaIdempotencyKey, idemKey)
	if approval != nil {
		out.Meta.Set(MetaApproval, approval)
	}
	return out
}
