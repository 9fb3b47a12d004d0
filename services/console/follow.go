package console

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
)

// The hub follows the bus only while the console is looked at. Copying every
// message of the IN and WORK streams cost the whole relay about a tenth of
// the gateway's CPU under load, most of the time for nobody.
//
//   - A request for the hub's envelopes (a page that shows them, an
//     envelope's JSON, a live page's connection) wakes a sleeping hub: it
//     subscribes, then loads the last envelopes of the streams into an
//     empty ring, as a console that had followed all along would hold them,
//     then adds what the subscriptions delivered meanwhile.
//   - While it follows, every such request first syncs with the bus: the
//     page shows every envelope published before it was asked for.
//   - After Config.Idle with no such request and no live page connected,
//     the hub unsubscribes and empties its ring.

// errClosed is returned by a hub's follow and hold after close.
var errClosed = errors.New("console: stopped")

// followBuffer is how many messages may wait for the hub's goroutine
// before the NATS client drops them as a slow consumer's.
const followBuffer = 1 << 16

// follower is one period of following the bus: the subscriptions, the
// channel they deliver to, and the goroutine that adds their messages to the
// ring.
type follower struct {
	subs  []*nats.Subscription
	msgs  chan *nats.Msg
	syncs chan chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// run adds f's messages to h's ring until f.stop is closed. It starts once
// the hub has loaded the streams, and first adds what came meanwhile
// (hub.addMeanwhile: IN is read before WORK, so an envelope found in WORK may
// have been published after one that came too late for IN). A sync request
// is answered once the messages the channel held are added.
func (f *follower) run(h *hub) {
	defer close(f.done)
	meanwhile := make([]*nats.Msg, len(f.msgs))
	for i := range meanwhile {
		meanwhile[i] = <-f.msgs
	}
	h.addMeanwhile(meanwhile)
	add := func(m *nats.Msg) { h.add(h.bus.Relative(m.Subject), m.Data, m.Header, h.now()) }
	for {
		select {
		case m := <-f.msgs:
			add(m)
		case ack := <-f.syncs:
			for n := len(f.msgs); n > 0; n-- {
				add(<-f.msgs)
			}
			close(ack)
		case <-f.stop:
			return
		}
	}
}

// follow makes the hub follow the bus, waking it if it sleeps, and returns
// once the ring holds every envelope published before follow was called.
// A sync that fails (the connection to NATS is down) is not an error: the
// page shows what the hub holds.
func (h *hub) follow(ctx context.Context) error {
	f, err := h.use(ctx, 0)
	if err != nil {
		return err
	}
	_ = h.sync(ctx, f)
	return nil
}

// hold is follow for a live page, without the sync (its renders follow):
// the hub keeps following until release is called, and for Config.Idle
// after that.
func (h *hub) hold(ctx context.Context) (release func(), err error) {
	if _, err := h.use(ctx, 1); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.fmu.Lock()
			defer h.fmu.Unlock()
			h.live--
			h.used = time.Now()
		})
	}, nil
}

// use notes a request (and a live page more, with hold 1) and returns the
// hub's follower, waking the hub first if it sleeps.
func (h *hub) use(ctx context.Context, hold int) (*follower, error) {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	if h.closed {
		return nil, errClosed
	}
	h.used = time.Now()
	if h.fol == nil {
		f, err := h.wake(ctx)
		if err != nil {
			return nil, err
		}
		h.fol = f
		if h.timer == nil {
			h.timer = time.AfterFunc(h.idle, h.checkIdle)
		} else {
			h.timer.Reset(h.idle)
		}
		h.log.Debug("console follows the bus", "loaded", h.count())
	}
	h.live += hold
	return h.fol, nil
}

// wake subscribes to the subjects of the IN and WORK streams, then loads the
// streams' last envelopes into the (empty) ring, and only then starts adding
// what the subscriptions delivered meanwhile: an envelope published during
// the load comes both ways and is kept once (add), with the time the stream
// stored it, none falls between, and the ring stays in time order. It never
// subscribes to rpc.*: a subscriber there would hide "no responders" from
// every requester.
func (h *hub) wake(ctx context.Context) (*follower, error) {
	f := &follower{msgs: make(chan *nats.Msg, followBuffer), syncs: make(chan chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{})}
	fail := func(err error) (*follower, error) {
		f.unsubscribe()
		h.empty()
		return nil, err
	}
	for _, root := range append([]string{"in"}, bus.WorkRoots()...) {
		subj := h.bus.Subject(root + ".>")
		sub, err := h.bus.Conn().ChanSubscribe(subj, f.msgs)
		if err != nil {
			return fail(fmt.Errorf("console: subscribe to %s: %w", subj, err))
		}
		f.subs = append(f.subs, sub)
	}
	// The server counts the subscriptions before it is asked for the
	// streams' last sequences.
	fctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if err := h.bus.Conn().FlushWithContext(fctx); err != nil {
		return fail(fmt.Errorf("console: subscribe: %w", err))
	}
	for _, rel := range []string{"in.x", "agent.x"} { // the IN and WORK streams
		if err := h.load(ctx, h.bus.StreamName(rel)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fail(err)
		}
	}
	go f.run(h)
	return f, nil
}

func (f *follower) unsubscribe() {
	for _, s := range f.subs {
		_ = s.Unsubscribe()
	}
}

// sync returns once f has added every message the server sent the hub
// before sync was called: the flush's answer comes after them on the
// connection, whose reader hands them to f.msgs first, and f answers the
// sync after adding what f.msgs holds.
func (h *hub) sync(ctx context.Context, f *follower) error {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	if err := h.bus.Conn().FlushWithContext(ctx); err != nil {
		return fmt.Errorf("console: sync with the bus: %w", err)
	}
	ack := make(chan struct{})
	select {
	case f.syncs <- ack:
	case <-f.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
	case <-f.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// checkIdle runs on the idle timer: it stops following once no live page
// is connected and no request came for Config.Idle, and otherwise sets the
// timer again.
func (h *hub) checkIdle() {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	if h.fol == nil {
		return
	}
	left := h.idle - time.Since(h.used)
	if h.live > 0 {
		left = h.idle
	}
	if left > 0 {
		h.timer.Reset(left)
		return
	}
	h.end(h.fol)
	h.fol = nil
	h.log.Debug("console stopped following the bus", "idle", h.idle)
}

// end stops f: it unsubscribes, stops f's goroutine (a message the client
// still hands over stays in f.msgs, for nobody) and empties the ring.
func (h *hub) end(f *follower) {
	f.unsubscribe()
	close(f.stop)
	<-f.done
	h.empty()
}

// empty lets the ring's envelopes go.
func (h *hub) empty() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events, h.ids = nil, map[string]bool{}
	close(h.changed)
	h.changed = make(chan struct{})
}

// close stops following for good; follow and hold fail afterwards.
func (h *hub) close() {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	if h.fol != nil {
		h.end(h.fol)
		h.fol = nil
	}
}
