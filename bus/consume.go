package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
)

// ConsumerConfig describes one worker type's durable consumer. Every process
// of that worker type uses the same Name and so shares the work (competing
// consumers); different worker types use different names and each see every
// message.
type ConsumerConfig struct {
	// Name is the durable consumer name, for example "agent". Required.
	Name string
	// Subject is the relative filter subject, for example "in.>" or "tool.call".
	// Required; all filtered subjects must live in one stream.
	Subject string
	// Subjects, when set, are the relative filter subjects instead of
	// Subject (JetStream's FilterSubjects: a consumer that only needs some
	// subjects is not sent the others). Subject still names the stream;
	// each of Subjects must be in it, and they must not overlap.
	Subjects []string
	// MaxDeliver is how many times a message is tried before it is
	// dead-lettered. Default 5.
	MaxDeliver int
	// AckWait is how long a delivery may go unacknowledged before JetStream
	// redelivers it (a crashed worker's messages come back after it). Default 30s.
	AckWait time.Duration
	// NakDelays are the redelivery delays after the 1st, 2nd, ... transient
	// failure; the last repeats. Default 1s, 5s, 15s, 30s, 60s. A failure
	// of the bus itself (ErrUnavailable: no leader, a timeout), retried by
	// the bus through the election already, is redelivered after 1s instead.
	NakDelays []time.Duration
	// Concurrency is how many messages this process handles at once. Default 1.
	Concurrency int
	// Heartbeat is how often a running handler tells JetStream it is still
	// working (in-progress ack). Default AckWait/3.
	Heartbeat time.Duration
	// ShutdownGrace is how long in-flight handlers may finish after ctx is
	// cancelled before their contexts are cancelled too. Default 30s.
	ShutdownGrace time.Duration
	// UnavailableHold is how long a delivery whose handler failed because
	// the bus itself was unavailable (ErrUnavailable: no leader through an
	// election, a timeout) is kept and handled again in this process, once a
	// second, before it is given back with a nak. Deliveries kept this way
	// do not use up MaxDeliver: every nak does, and a cluster election that
	// outlasts MaxDeliver quick naks (a SIGKILLed node's, about 5 s) would
	// dead-letter a message nothing was wrong with. Default 2m.
	UnavailableHold time.Duration
	// DeliverNew starts a new consumer at the messages stored since this Bus
	// was opened instead of at the stream's start: no history, and nothing
	// stored while the process starts up (a webhook accepted before the
	// consumer exists) is skipped. A consumer that exists keeps where it
	// started.
	DeliverNew bool
}

func (c *ConsumerConfig) setDefaults() {
	c.MaxDeliver = cmp.Or(c.MaxDeliver, 5)
	c.AckWait = cmp.Or(c.AckWait, 30*time.Second)
	if len(c.NakDelays) == 0 {
		c.NakDelays = []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute}
	}
	c.Concurrency = config.Positive(c.Concurrency, 1)
	c.Heartbeat = cmp.Or(c.Heartbeat, c.AckWait/3)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, 30*time.Second)
	c.UnavailableHold = cmp.Or(c.UnavailableHold, 2*time.Minute)
}

// Validate reports a consumer configuration that cannot work.
func (c *ConsumerConfig) Validate() error {
	if !prefixRE.MatchString(c.Name) {
		return fmt.Errorf("consumer name %q: want letters, digits, '-' or '_'", c.Name)
	}
	if c.Subject == "" {
		return fmt.Errorf("consumer %s: subject is required", c.Name)
	}
	if c.MaxDeliver < 1 {
		return fmt.Errorf("consumer %s: max deliver %d must be at least 1", c.Name, c.MaxDeliver)
	}
	if c.Heartbeat <= 0 || c.Heartbeat >= c.AckWait {
		return fmt.Errorf("consumer %s: heartbeat %s must be positive and below ack wait %s", c.Name, c.Heartbeat, c.AckWait)
	}
	return nil
}

// HeaderReplayFor names the one consumer a replayed dead letter is meant for;
// other consumers acknowledge it without handling it.
const HeaderReplayFor = "Relay-Replay-For"

// Consume runs h for every message of the consumer until ctx is cancelled.
// Then it stops fetching, lets in-flight handlers finish (up to ShutdownGrace)
// and returns nil. It returns an error only when the consumer cannot be set up.
func (b *Bus) Consume(ctx context.Context, cfg ConsumerConfig, h Handler) error {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	stream, cons, err := b.createConsumer(ctx, &cfg)
	if err != nil || cons == nil {
		return err
	}
	// Handlers run on a context that survives ctx's cancellation for the grace
	// period, so shutdown drains in-flight work instead of abandoning it.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	p := &puller{
		b: b, cfg: &cfg, stream: stream, cons: cons, h: Recover()(h),
		log:  b.log.With("consumer", cfg.Name),
		sem:  make(chan struct{}, cfg.Concurrency),
		work: make(chan jetstream.Msg), quit: make(chan struct{}),
	}
	p.run(ctx, hctx)
	close(p.quit)
	p.drain(hcancel)
	return nil
}

// createConsumer creates or updates the durable consumer of cfg and returns
// it with its stream's name. It returns a nil consumer and no error when ctx
// ended before the consumer existed: there is nothing to drain then.
func (b *Bus) createConsumer(ctx context.Context, cfg *ConsumerConfig) (string, jetstream.Consumer, error) {
	stream := b.StreamName(cfg.Subject)
	if stream == "" {
		return "", nil, fmt.Errorf("consumer %s: no relay stream covers subject %s", cfg.Name, cfg.Subject)
	}
	cc := jetstream.ConsumerConfig{
		Durable:       cfg.Name,
		FilterSubject: b.Subject(cfg.Subject),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		// The bus dead-letters at MaxDeliver itself; JetStream sets no limit
		// of its own, so a message whose dead letter cannot be stored (the
		// dead-letter stream unavailable) is offered again until it can be,
		// never dropped.
		MaxDeliver:    -1,
		MaxAckPending: max(1000, cfg.Concurrency*4),
	}
	if len(cfg.Subjects) > 0 {
		cc.FilterSubject = ""
		cc.FilterSubjects = make([]string, len(cfg.Subjects))
		for i, s := range cfg.Subjects {
			if b.StreamName(s) != stream {
				return "", nil, fmt.Errorf("consumer %s: filter subject %q is not in stream %s", cfg.Name, s, stream)
			}
			cc.FilterSubjects[i] = b.Subject(s)
		}
	}
	// A cluster electing a leader, a server restarting or a stream being
	// re-created answers with timeouts and 503s for a while: keep trying
	// until ctx ends (Ensure, which Ready reports meanwhile). Only a request
	// JetStream refuses as bad (400: the configuration cannot be applied) is
	// returned.
	var cons jetstream.Consumer
	err := b.Ensure(ctx, "consumer "+cfg.Name+" on "+stream, func(ctx context.Context) error {
		err := b.startAt(ctx, stream, cfg, &cc)
		if err == nil {
			cons, err = b.js.CreateOrUpdateConsumer(ctx, stream, cc)
		}
		if err != nil && !badRequest(err) && !Transient(err) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err) // a stream being re-created, say
		}
		return err
	})
	switch {
	case err == nil:
		return stream, cons, nil
	case ctx.Err() != nil:
		return "", nil, nil
	}
	return "", nil, fmt.Errorf("create consumer %s on %s: %w", cfg.Name, stream, err)
}

// startAt sets where a DeliverNew consumer starts: an existing consumer's own
// start (JetStream refuses to change it), else the time the Bus was opened.
func (b *Bus) startAt(ctx context.Context, stream string, cfg *ConsumerConfig, cc *jetstream.ConsumerConfig) error {
	if !cfg.DeliverNew {
		return nil
	}
	cons, err := b.js.Consumer(ctx, stream, cfg.Name)
	switch {
	case err == nil:
		old := cons.CachedInfo().Config
		cc.DeliverPolicy, cc.OptStartSeq, cc.OptStartTime = old.DeliverPolicy, old.OptStartSeq, old.OptStartTime
		return nil
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		at := b.opened
		cc.DeliverPolicy, cc.OptStartTime = jetstream.DeliverByStartTimePolicy, &at
		return nil
	default:
		return fmt.Errorf("look up consumer %s on %s: %w", cfg.Name, stream, err)
	}
}

// badRequest reports whether JetStream refused a request as malformed
// (status 400), which retrying cannot fix.
func badRequest(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == 400
}

// puller is the pull loop of one Consume call: reserve the free handler
// slots, fetch at most that many messages with one short pull request, hand
// each to a handler as it arrives, give back the slots the pull did not fill,
// repeat. Every pull ends by itself within pullWait, so nothing client-side
// can leave the consumer without an outstanding pull for long.
type puller struct {
	b      *Bus
	cfg    *ConsumerConfig
	stream string
	cons   jetstream.Consumer
	h      Handler
	log    *slog.Logger
	sem    chan struct{}  // one token per running handler or reserved slot
	wg     sync.WaitGroup // handler goroutines
	work   chan jetstream.Msg
	quit   chan struct{} // closed when the pull loop has ended
}

// run pulls and dispatches until ctx is cancelled. Handlers run on hctx,
// which outlives ctx by the shutdown grace.
func (p *puller) run(ctx, hctx context.Context) {
	retry := 0
	for ctx.Err() == nil {
		slots := p.reserve(ctx)
		if slots == 0 {
			continue
		}
		if err := p.fetch(ctx, hctx, slots); err != nil {
			if ctx.Err() != nil {
				break
			}
			retry++
			p.log.Warn("pull failed; retrying", "err", err)
			sleepCtx(ctx, nakDelay([]time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}, uint64(retry)))
			continue
		}
		retry = 0
	}
}

// reserve waits for one free handler slot and takes every other free one at
// once. It returns how many it took: 0 when ctx ended first.
func (p *puller) reserve(ctx context.Context) int {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	slots := 1
	for slots < p.cfg.Concurrency {
		select {
		case p.sem <- struct{}{}:
			slots++
		default:
			return slots
		}
	}
	return slots
}

// release gives back n reserved slots.
func (p *puller) release(n int) {
	for range n {
		<-p.sem
	}
}

// fetch runs one pull request for at most slots messages and dispatches each.
// It returns the error of a pull that could not start; its slots are given
// back then.
func (p *puller) fetch(ctx, hctx context.Context, slots int) error {
	fctx, fcancel := context.WithTimeout(ctx, pullWait)
	batch, err := p.cons.Fetch(slots, jetstream.FetchContext(fctx))
	if err != nil {
		fcancel()
		p.release(slots)
		return err
	}
	for msg := range batch.Messages() {
		slots--
		p.dispatch(ctx, hctx, msg)
	}
	fcancel()
	p.release(slots)
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
		p.log.Debug("pull ended", "err", err)
	}
	return nil
}

// dispatch hands msg to an idle handler goroutine, or to a new one when
// none waits; each gives its slot back when done. A message pulled during
// shutdown is handed back to JetStream at once rather than left to its ack
// wait.
func (p *puller) dispatch(ctx, hctx context.Context, msg jetstream.Msg) {
	if ctx.Err() != nil {
		_ = msg.Nak()
		p.b.outcome(p.cfg.Name, "returned")
		<-p.sem
		return
	}
	select {
	case p.work <- msg:
	default:
		p.wg.Add(1)
		go p.handler(hctx, msg)
	}
}

// handler handles msg, then waits for the next one until the pull loop has
// ended. Handler goroutines are reused rather than started per message: a
// fresh goroutine's stack grows (and is copied) on every delivery a deep
// handler runs. There are at most about Concurrency of them, since a new one
// starts only for a message no idle one took.
func (p *puller) handler(hctx context.Context, msg jetstream.Msg) {
	defer p.wg.Done()
	for {
		p.b.handle(hctx, p.quit, p.cfg, p.stream, msg, p.h, p.log)
		msg = nil // not kept while idle
		<-p.sem
		select {
		case msg = <-p.work:
		case <-p.quit:
			return
		}
	}
}

// drain waits for the in-flight handlers (once the pull loop has ended and
// quit is closed, idle ones return at once); after the shutdown grace it
// cancels their context and waits for them to return.
func (p *puller) drain(hcancel context.CancelFunc) {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(p.cfg.ShutdownGrace):
		p.log.Warn("shutdown grace over; cancelling in-flight handlers (their messages will be redelivered)")
		hcancel()
		<-done
	}
}

// handle runs one delivery and maps its result to exactly one outcome. h
// must recover its panics (Recover).
func (b *Bus) handle(ctx context.Context, stopping <-chan struct{}, cfg *ConsumerConfig, stream string, msg jetstream.Msg, h Handler, log *slog.Logger) {
	start := time.Now()
	md, err := msg.Metadata()
	if err != nil {
		log.Error("message without metadata; terminating", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	if to := msg.Headers().Get(HeaderReplayFor); to != "" && to != cfg.Name {
		b.outcome(cfg.Name, "skip")
		_ = msg.Ack()
		return
	}
	m := &Message{
		Subject:   b.Relative(msg.Subject()),
		Header:    msg.Headers(),
		Data:      msg.Data(),
		Delivered: md.NumDelivered,
		StreamSeq: md.Sequence.Stream,
		Consumer:  cfg.Name,
	}
	env, perr := envelope.Parse(msg.Data())
	if perr != nil {
		b.deadLetter(ctx, cfg, msg, m, "invalid envelope: "+perr.Error(), log)
		return
	}
	m.Envelope = env
	if md.NumDelivered > uint64(cfg.MaxDeliver) {
		// Every delivery the bus allows was made and none ended in a dead
		// letter: the handler's process died each time (a message that
		// kills its worker), or the dead letter could not be stored. JetStream
		// sets no limit of its own, so the bus ends it here, without handling
		// it again, and offers it again until the dead letter is stored.
		b.deadLetter(ctx, cfg, msg, m, fmt.Sprintf("delivered %d times (max deliveries %d) without being handled to the end: "+
			"its handler's process ended each time, or its dead letter could not be stored", md.NumDelivered, cfg.MaxDeliver), log)
		return
	}

	if err := envelope.Readable(env.Meta.MCPVersion); err != nil {
		// Not this relay's to read: a competing consumer of another version
		// may take it on a redelivery; when the deliveries run out it is a
		// dead letter, replayed once the consumers read its format.
		b.settle(ctx, cfg, msg, m, md.NumDelivered, fmt.Errorf("%w (not handled: upgrade this consumer, then replay the dead letter)", err), log)
		return
	}

	// Heartbeat: long handlers keep their delivery from being redelivered.
	hbStop := heartbeat(ctx, msg, cfg.Heartbeat)
	var traced func(error)
	if tr := b.cfg.Trace; tr != nil && tr.Consume != nil {
		ctx, traced = tr.Consume(ctx, msg.Subject(), m)
	}
	herr := h.Handle(ctx, m) // h recovers panics (Consume wrapped it)
	for held := time.Now(); holdUnavailable(herr) && time.Since(held) < cfg.UnavailableHold; {
		// The bus was unavailable: handled again here, the delivery kept
		// (its heartbeat goes on), rather than naked: see UnavailableHold.
		log.WarnContext(ctx, "bus unavailable; handling the message again", "envelope_id", m.Envelope.ID, "subject", m.Subject,
			"delivered", m.Delivered, "retried", m.Retried, "retry_in", unavailableNak, "err", clip.Line(herr.Error(), maxReasonLine))
		if !holdOn(ctx, stopping, unavailableNak) {
			break // shutting down: naked, another process takes it
		}
		m.Retried++
		b.outcome(cfg.Name, "held")
		herr = h.Handle(ctx, m)
	}
	if traced != nil {
		traced(herr)
	}
	hbStop()
	if b.metrics != nil {
		b.metrics.consumer(cfg.Name).handleTime.Observe(time.Since(start).Seconds())
	}
	b.settle(ctx, cfg, msg, m, md.NumDelivered, herr, log)
}

// settle maps a delivery's result to exactly one outcome: an ack, a dead
// letter (a permanent error, or the last delivery allowed), or a nak after
// the error's retry delay or the consumer's.
func (b *Bus) settle(ctx context.Context, cfg *ConsumerConfig, msg jetstream.Msg, m *Message, delivered uint64, herr error, log *slog.Logger) {
	switch {
	case herr == nil:
		if err := msg.Ack(); err != nil {
			log.Warn("ack failed; message will be redelivered", "envelope_id", m.Envelope.ID, "err", err)
		}
		b.outcome(cfg.Name, "ack")
	case IsPermanent(herr):
		b.deadLetter(ctx, cfg, msg, m, herr.Error(), log)
	case delivered >= uint64(cfg.MaxDeliver):
		b.deadLetter(ctx, cfg, msg, m, fmt.Sprintf("max deliveries (%d) reached: %v", cfg.MaxDeliver, herr), log)
	default:
		delay := RetryDelay(herr)
		switch {
		case delay > 0:
		case unavailable(herr):
			// The bus itself was unavailable (no leader, a timeout): its
			// requests already retried through the election, and the
			// next delivery follows it too, instead of waiting out the
			// consumer's growing schedule.
			delay = unavailableNak
		default:
			delay = nakDelay(cfg.NakDelays, delivered)
		}
		log.WarnContext(ctx, "handler failed; will retry", "envelope_id", m.Envelope.ID, "subject", m.Subject,
			"delivered", delivered, "retry_in", delay, "err", clip.Line(herr.Error(), maxReasonLine))
		_ = msg.NakWithDelay(delay)
		b.outcome(cfg.Name, "nak")
	}
}

// heartbeat tells JetStream every `every` that msg is still being handled,
// until stop is called or ctx ends. It is a timer that re-arms itself rather
// than a goroutine and a ticker per delivery: most handlers return long
// before the first beat.
func heartbeat(ctx context.Context, msg jetstream.Msg, every time.Duration) (stop func()) {
	var mu sync.Mutex
	stopped := false
	mu.Lock()
	defer mu.Unlock()
	var t *time.Timer
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped || ctx.Err() != nil {
			return
		}
		_ = msg.InProgress()
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// unavailableNak is the redelivery delay of a message whose handler failed
// because the bus was unavailable.
const unavailableNak = retryMax

// unavailable reports whether err is the bus (JetStream) being unavailable
// rather than the handler's own failure: ErrUnavailable, which the bus's
// publishes and bucket requests wrap, or a JetStream request that timed out
// or found no responder.
func unavailable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// holdOn waits d and reports whether the hold goes on: not when ctx ends or
// the consumer stops (stopping closed).
func holdOn(ctx context.Context, stopping <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-stopping:
	}
	return false
}

// holdUnavailable reports whether a handler's error is the bus being
// unavailable and nothing else decides its retry (not permanent, no delay of
// its own).
func holdUnavailable(err error) bool {
	return err != nil && unavailable(err) && !IsPermanent(err) && RetryDelay(err) == 0
}

func nakDelay(delays []time.Duration, delivered uint64) time.Duration {
	i := int(delivered) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(delays) {
		i = len(delays) - 1
	}
	return delays[i]
}

func (b *Bus) outcome(consumer, o string) {
	if b.metrics != nil {
		b.metrics.consumer(consumer).outcome(o).Inc()
	}
}

// pullWait bounds one pull request. Messages are handed over as they arrive;
// the bound only decides how soon an idle or unanswered pull is replaced.
const pullWait = 5 * time.Second

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
