package ingest

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// DefaultLogPerSecond is how many "webhook accepted" lines the gateway
// writes in one second at most (Config.LogPerSecond).
const DefaultLogPerSecond = 20

// lineSampler lets at most per lines through in each wall-clock second and
// counts the others, for a summary line ("suppressed K") once a second. Past
// the limit a webhook costs one atomic add: nothing is formatted, nothing
// allocated. It is safe for concurrent use; the window switch is
// approximate (a few lines more may pass in the second it switches), which
// a log sampler can afford.
type lineSampler struct {
	per        int64
	window     atomic.Int64 // the unix second counted in n
	n          atomic.Int64 // lines asked for in window
	suppressed atomic.Int64 // lines left out since the last summary
}

// allow reports whether a line at now may be written; when not, it is
// counted as suppressed.
func (l *lineSampler) allow(now time.Time) bool {
	if l.per <= 0 {
		return false
	}
	sec := now.Unix()
	if w := l.window.Load(); w != sec && l.window.CompareAndSwap(w, sec) {
		l.n.Store(0)
	}
	if l.n.Add(1) > l.per {
		l.suppressed.Add(1)
		return false
	}
	return true
}

// takeSuppressed returns the lines left out since its last call.
func (l *lineSampler) takeSuppressed() int64 { return l.suppressed.Swap(0) }

// logAccepted writes the info line of an accepted webhook, sampled.
func (s *Service) logAccepted(ctx context.Context, rt *route, o *outcome, now time.Time) {
	if !s.accepted.allow(now) || !s.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "webhook accepted", slog.String("provider", rt.name), slog.String("event", o.event),
		slog.String("delivery", o.delivery), slog.String("thread", o.thread), slog.Int("envelopes", o.stored),
		slog.Int("duplicates", o.dups))
}

// reportSuppressed writes, once a second while accepted lines are being
// left out, how many were, until ctx is cancelled; then once more.
func (s *Service) reportSuppressed(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	report := func() {
		if k := s.accepted.takeSuppressed(); k > 0 {
			s.log.Info("webhook accepted lines suppressed", "suppressed", k, "per_second", s.accepted.per)
		}
	}
	for {
		select {
		case <-ctx.Done():
			report()
			return
		case <-t.C:
			report()
		}
	}
}
