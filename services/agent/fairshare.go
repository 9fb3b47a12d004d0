package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fairshare"
	"github.com/relaystation/relay/internal/tick"
)

// Limits bound the tasks one source starts per window, so one outsider (a
// flood of webhooks for one repository, one busy Slack channel, one actor)
// cannot drive unbounded model calls, embeddings and approval messages, nor
// starve the other sources. A trigger over a limit starts no task: its
// envelope stays stored on the bus (and visible in the console), and it is
// counted into one digest task per source and window, started after the
// window ends. The first trigger over a limit in a window publishes one
// agent.notice that says so. Counts are shared by every agent process
// (package fairshare). Zero turns a limit off.
type Limits struct {
	// PerRepository: tasks per window from one repository (GitHub
	// owner/repo, a Sentry organisation, an OpenProject host).
	// RELAY_LIMIT_TASKS_PER_REPO, default 30.
	PerRepository int
	// PerChannel: tasks per window from one Slack channel.
	// RELAY_LIMIT_TASKS_PER_CHANNEL, default 30.
	PerChannel int
	// PerActor: tasks per window started by one actor (per provider).
	// RELAY_LIMIT_TASKS_PER_ACTOR, default 20.
	PerActor int
	// Window is the length of a window. RELAY_LIMIT_WINDOW, default 1m.
	Window time.Duration
}

// Default limits.
const (
	DefaultLimitPerRepository = 30
	DefaultLimitPerChannel    = 30
	DefaultLimitPerActor      = 20
	DefaultLimitWindow        = time.Minute
)

func (l Limits) off() bool { return l.PerRepository <= 0 && l.PerChannel <= 0 && l.PerActor <= 0 }

// metaDigest marks a digest envelope (meta.digest) the agent published.
const metaDigest = "digest"

// SubjectDigest is the event of digest envelopes: in.{channel}.digest.
const SubjectDigest = "digest"

// sourceLimit is one source of a trigger and its limit.
type sourceLimit struct {
	kind, source string
	limit        int
}

// sources are the sources e counts against: its repository (or Slack
// channel) and its actor.
func (l Limits) sources(e *envelope.Envelope) []sourceLimit {
	var out []sourceLimit
	// Only the providers' own channels: the thread key is the provider's.
	if envelope.ThreadChannel(e.Meta.Thread) == e.Channel {
		switch kind, src := envelope.ThreadSource(e.Meta.Thread); kind {
		case "channel":
			out = append(out, sourceLimit{kind, src, l.PerChannel})
		case "repository":
			out = append(out, sourceLimit{kind, src, l.PerRepository})
		}
	}
	if src := e.Meta.Source; src != nil && src.Actor != "" {
		out = append(out, sourceLimit{"actor", string(e.Channel) + ":actor:" + src.Actor, l.PerActor})
	}
	return out
}

// admit counts the trigger e against each of its sources and reports the
// first limit it is over (nil: it may start a task).
func (s *Service) admit(ctx context.Context, e *envelope.Envelope) (*fairshare.Verdict, *sourceLimit, error) {
	if s.limiter == nil {
		return nil, nil, nil
	}
	for _, sl := range s.cfg.Limits.sources(e) {
		if sl.limit <= 0 {
			continue
		}
		v, err := s.limiter.Take(ctx, sl.source, sl.limit)
		if err != nil {
			return nil, nil, err
		}
		if !v.Allowed {
			return &v, &sl, nil
		}
	}
	return nil, nil, nil
}

// admitOrDefer counts e against its sources; over a limit it defers e into
// its digest and reports true.
func (s *Service) admitOrDefer(ctx context.Context, e *envelope.Envelope, log *slog.Logger) (bool, error) {
	v, sl, err := s.admit(ctx, e)
	if err != nil || v == nil {
		return false, err
	}
	log.Debug("trigger over a task limit; collected into the digest", "source", v.Source, "count", v.Count, "limit", v.Limit)
	return true, s.deferTrigger(ctx, e, v, sl)
}

// deferTrigger counts e into the digest of the source it is over, and the
// first trigger over the limit in the window publishes the notice.
func (s *Service) deferTrigger(ctx context.Context, e *envelope.Envelope, v *fairshare.Verdict, sl *sourceLimit) error {
	it := fairshare.Item{EnvelopeID: e.ID, Thread: e.Meta.Thread, At: time.Now().UTC()}
	if src := e.Meta.Source; src != nil {
		it.URL, it.Actor = src.URL, src.Actor
	}
	it.Title, _, _ = strings.Cut(strings.TrimSpace(e.Content), "\n")
	if err := s.limiter.Defer(ctx, *v, it); err != nil {
		return err
	}
	s.metrics.deferred.WithLabelValues(sl.kind).Inc()
	if !v.FirstOver {
		return nil
	}
	s.log.Warn("over the task limit; further triggers of this source go into one digest task after the window",
		"source", v.Source, "kind", sl.kind, "limit", v.Limit, "window", s.limiter.Window().String(), "until", v.End.Format(time.RFC3339))
	text := fmt.Sprintf("%s is over the limit of %d agent tasks per %s (per %s): further events until %s are not answered one by one "+
		"but collected into one digest task after that. Every event is still stored and shown in the console.",
		v.Source, v.Limit, s.limiter.Window(), sl.kind, v.End.Format("15:04:05 MST"))
	n := envelope.New(e.Channel, envelope.RoleSystem, text)
	n.ID = envelope.DerivedID("relay-limit:" + v.Source + ":" + v.Start.Format(time.RFC3339))
	n.Meta.Thread = e.Meta.Thread
	if src := e.Meta.Source; src != nil {
		c := *src
		n.Meta.Source = &c
	}
	n.Meta.Set("notice", map[string]any{"kind": "limit", "source": v.Source, "per": sl.kind, "limit": v.Limit,
		"window": s.limiter.Window().String(), "until": v.End.Format(time.RFC3339)})
	_, err := s.bus.Publish(ctx, SubjectNotice, n, bus.WithMsgID("limit:"+v.Source+":"+v.Start.Format(time.RFC3339)))
	return err
}

// sweepDigests starts a digest task for every digest whose window ended,
// until ctx is done. Every agent sweeps; the digest's publish is
// de-duplicated by its key and its removal is revision-checked, so one task
// comes of each.
func (s *Service) sweepDigests(ctx context.Context) error {
	every := min(max(s.limiter.Window()/6, flushEvery), 10*time.Second)
	last := time.Now()
	tick.Every(ctx, flushEvery, func() {
		if err := s.limiter.Flush(ctx); err != nil {
			s.log.Warn("deferred triggers not yet added to their digests; trying again", "err", err)
		}
		if time.Since(last) >= every {
			last = time.Now()
			s.publishDigests(ctx)
		}
	})
	// What was collected since the last flush, before the process stops.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.limiter.Flush(fctx); err != nil {
		s.log.Warn("deferred triggers lost from their digests at shutdown (their envelopes stay stored)", "err", err)
	}
	return nil
}

// flushEvery is how often deferred triggers are written to their digests.
const flushEvery = 200 * time.Millisecond

func (s *Service) publishDigests(ctx context.Context) {
	due, err := s.limiter.Due(ctx)
	if err != nil {
		s.log.Warn("digests not read; trying again", "err", err)
	}
	for _, d := range due {
		e := digestEnvelope(d)
		subject := envelope.SubjectInbound + "." + envelope.Token(string(e.Channel)) + "." + SubjectDigest
		if _, err := s.bus.Publish(ctx, subject, e, bus.WithMsgID("digest:"+d.Key())); err != nil {
			s.log.Warn("digest not published; trying again", "source", d.Source, "err", err)
			continue
		}
		if _, err := s.limiter.Done(ctx, d); err != nil {
			s.log.Warn("published digest not removed", "source", d.Source, "err", err)
		}
	}
}

// digestEnvelope is the trigger of a digest task: the events of d, in the
// thread (and so with the answer target) of the first of them.
func digestEnvelope(d *fairshare.Digest) *envelope.Envelope {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events from %s between %s and %s were over the limit of %d tasks per window and are collected here. "+
		"Summarise them for the team: what they are about, which look urgent, which look like duplicates or noise.\n",
		d.Count, d.Source, d.Start.Format(time.RFC3339), d.End.Format(time.RFC3339), d.Limit)
	ch := envelope.ChannelInternal
	thread := "digest:" + d.Source
	var first *fairshare.Item
	for i, it := range d.Items {
		if i == 0 {
			first = &d.Items[0]
		}
		fmt.Fprintf(&b, "\n- %s", it.Title)
		if it.URL != "" {
			fmt.Fprintf(&b, " (%s)", it.URL)
		}
		if it.Actor != "" {
			fmt.Fprintf(&b, " by %s", it.Actor)
		}
	}
	if more := d.Count - len(d.Items); more > 0 {
		fmt.Fprintf(&b, "\n- … and %d more", more)
	}
	if first != nil && first.Thread != "" {
		thread = first.Thread
		if c, _, ok := strings.Cut(first.Thread, ":"); ok {
			switch envelope.Channel(c) {
			case envelope.ChannelGitHub, envelope.ChannelSlack, envelope.ChannelSentry, envelope.ChannelOpenProject:
				ch = envelope.Channel(c)
			}
		}
	}
	e := envelope.New(ch, envelope.RoleUser, b.String())
	e.ID = envelope.DerivedID("relay-digest:" + d.Key())
	e.Meta.Thread = thread
	e.Meta.Source = &envelope.Source{Event: SubjectDigest, DeliveryID: "digest:" + d.Key()}
	if first != nil {
		e.Meta.Source.URL = first.URL
	}
	ids := make([]any, len(d.Items))
	for i, it := range d.Items {
		ids[i] = it.EnvelopeID
	}
	e.Meta.Set(metaDigest, map[string]any{"source": d.Source, "count": d.Count, "start": d.Start.Format(time.RFC3339),
		"end": d.End.Format(time.RFC3339), "envelopes": ids})
	return e
}

// isDigest reports whether e is a digest the agent published: only the
// agent writes meta.digest and the digest event; no mapper does.
func isDigest(e *envelope.Envelope) bool {
	_, ok := e.Meta.Get(metaDigest)
	return ok && e.Role == envelope.RoleUser && e.Meta.Source != nil && e.Meta.Source.Event == SubjectDigest
}
