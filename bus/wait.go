package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/internal/jsack"
)

// Retries of JetStream requests during a leader change follow the cluster:
// an attempt still waiting when a stream or consumer leader is elected (a
// JetStream advisory), or when the connection comes back, is given up and
// tried again at once; between attempts that fail fast the wait grows from
// retryFirst to retryMax. A fixed schedule of seconds would add its own
// wait to every election's.
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = time.Second
)

// DefaultRetryFor is how long an operation on a bucket opened through the
// bus (OpenBucket) retries a transient failure before it returns it
// (Config.RetryFor): longer than an election after a node crash (about 5 s
// with nats-server's defaults), short of a handler's ack wait.
const DefaultRetryFor = 12 * time.Second

// ErrReplicas marks a stream or bucket the cluster cannot hold with the
// configured replica count (RELAY_STREAM_REPLICAS): a wrong setting, which
// retrying does not fix.
var ErrReplicas = errors.New("RELAY_STREAM_REPLICAS: the NATS server cannot hold this replica count")

// replicasGrace is how long "no suitable peers for placement" without an
// offline peer is taken for a cluster still forming before it counts as a
// replica count the cluster cannot hold.
const replicasGrace = 30 * time.Second

// Transient reports whether err is JetStream being slow or without a leader
// for a while (a timeout, no responders, a 503, a cluster electing or
// placing): a failure to retry, not to give up on. A context cancelled by
// the caller is not transient.
func Transient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrUnavailable):
		return true
	case errors.Is(err, context.Canceled):
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10008, // JetStream system temporarily unavailable (no meta leader)
		10009, // cluster can not handle request (not the leader)
		10118, // stream is offline
		10023: // insufficient resources (a peer down while placing)
		return true
	case 10005: // no suitable peers for placement
		return strings.Contains(apiErr.Description, "peer offline")
	}
	return apiErr.Code == 503 || apiErr.Code == 408
}

// replicasError reports whether err says the cluster (or a single server)
// cannot hold the replica count asked for.
func replicasError(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10074, // replicas > 1 not supported in non-clustered mode
		10006: // JetStream not in clustered mode
		return true
	case 10005:
		return !strings.Contains(apiErr.Description, "peer offline")
	}
	return false
}

// beacon is closed and replaced each time a leader is elected or the
// connection comes back: waiters retry then instead of at their next tick.
type beacon struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBeacon() *beacon { return &beacon{ch: make(chan struct{})} }

// wait returns the channel the next fire closes.
func (l *beacon) wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ch
}

func (l *beacon) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.ch)
	l.ch = make(chan struct{})
}

// leaderSubjects are the advisories JetStream sends to the account when a
// replicated stream or consumer (a bucket is a stream) has a new leader.
var leaderSubjects = []string{
	"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.>",
	"$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.>",
}

// watchLeaders subscribes to the leader advisories; the subscriptions live
// as long as the connection (and come back with it).
func (b *Bus) watchLeaders() {
	for _, subj := range leaderSubjects {
		if _, err := b.nc.Subscribe(subj, func(*nats.Msg) { b.leaders.fire() }); err != nil {
			b.log.Warn("leader advisories not watched; retries use their backoff alone", "subject", subj, "err", err)
		}
	}
}

// pending is what the bus waits for: each entry names a stream, bucket or
// consumer not in place yet, with its last error. Ready reports them.
type pending struct {
	mu sync.Mutex
	m  map[string]error
}

func (p *pending) set(what string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]error{}
	}
	p.m[what] = err
}

func (p *pending) done(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, what)
}

// err is nil when nothing is pending, else names each pending thing.
func (p *pending) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.m) == 0 {
		return nil
	}
	names := make([]string, 0, len(p.m))
	for n := range p.m {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s (%v)", n, p.m[n])
	}
	return fmt.Errorf("%w: %s", ErrWaiting, strings.Join(parts, "; "))
}

// ErrWaiting is what Ready reports while the bus waits for a stream, a
// bucket or a consumer to be in place.
var ErrWaiting = errors.New("bus: waiting for")

// Ensure runs op until it succeeds, for a stream, bucket or consumer a
// process needs before it can work: each attempt waits at most the bus's
// RequestTimeout (or until a leader is elected), a transient failure is
// retried (see Transient), and while it is, Ready reports what (say,
// "bucket relay_outbound") with the last error. It returns nil, ctx's
// error once ctx ends, an error wrapping ErrReplicas for a replica count
// the cluster cannot hold, or op's error when it is neither transient nor
// that (a configuration JetStream refuses).
func (b *Bus) Ensure(ctx context.Context, what string, op func(ctx context.Context) error) error {
	defer b.waiting.done(what)
	start := time.Now()
	wait := retryFirst
	for attempt := 1; ; attempt++ {
		err := b.attempt(ctx, op)
		if err == nil {
			if attempt > 1 {
				b.log.Info("in place after waiting", "what", what, "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if replicasError(err) && (!isNoPeers(err) || time.Since(start) > replicasGrace) {
			return fmt.Errorf("%s: %w (replicas %d): %w", what, ErrReplicas, b.cfg.Replicas, err)
		}
		if !Transient(err) && !replicasError(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		b.waiting.set(what, err)
		if attempt == 1 || attempt%20 == 0 {
			b.log.Warn("waiting for nats", "what", what, "attempt", attempt, "err", err)
		}
		if !b.pause(ctx, wait) {
			return ctx.Err()
		}
		wait = min(2*wait, retryMax)
	}
}

// attempt runs op once, on a context bounded by RequestTimeout and cut
// short when a leader is elected (the request may have gone to a server
// that will not answer; the next attempt reaches the new leader).
func (b *Bus) attempt(ctx context.Context, op func(ctx context.Context) error) error {
	actx, cancel := jsack.Bound(ctx, b.cfg.RequestTimeout)
	defer cancel()
	elected := b.leaders.wait()
	done := make(chan struct{})
	defer close(done)
	cctx, ccancel := context.WithCancelCause(actx)
	defer ccancel(nil)
	go func() {
		select {
		case <-elected:
			ccancel(errLeaderElected)
		case <-done:
		}
	}()
	err := op(cctx)
	if err != nil && context.Cause(cctx) == errLeaderElected && ctx.Err() == nil {
		// Cut short: retried at once, reported as the timeout it stands for.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

var errLeaderElected = errors.New("a leader was elected")

// errAmbiguous marks a write whose outcome a retry cannot tell: not retried.
var errAmbiguous = errors.New("outcome unknown")

// pause waits d, or less when a leader is elected or the connection comes
// back; it reports false when ctx ended first.
func (b *Bus) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-b.leaders.wait():
	}
	return true
}

// retry runs op as Ensure does, after start: a transient failure is tried
// again (following the cluster) for at most RetryFor, or until ctx's
// deadline would pass, then returned wrapped in ErrUnavailable, so that a
// handler naks its message and a process never exits for it.
func (b *Bus) retry(ctx context.Context, op func(ctx context.Context) error) error {
	give := time.Now().Add(b.cfg.RetryFor)
	if d, ok := ctx.Deadline(); ok && d.Before(give) {
		give = d
	}
	wait := retryFirst
	for {
		err := b.attempt(ctx, op)
		if err == nil || !Transient(err) || errors.Is(err, errAmbiguous) || ctx.Err() != nil || time.Until(give) <= wait {
			if err != nil && Transient(err) && !errors.Is(err, ErrUnavailable) {
				err = fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			return err
		}
		if !b.pause(ctx, wait) {
			return err
		}
		wait = min(2*wait, retryMax)
	}
}

func isNoPeers(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10005
}
