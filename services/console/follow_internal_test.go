package console

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
)

// followHub returns a hub of size envelopes on an embedded bus, closed when
// t ends, and the number of subscriptions on the bus's connection while the
// hub sleeps (after one publish, so the client's reply subscription counts).
func followHub(t *testing.T, size int, idle time.Duration) (*hub, *bus.Bus, int) {
	t.Helper()
	b := bustest.Embedded(t)
	h := newHub(b, size, idle, time.Now, nil)
	t.Cleanup(h.close)
	publish(t, b, "system.warmup", 1)
	return h, b, b.Conn().NumSubscriptions()
}

// publish publishes n envelopes on subject and returns their ids in order.
func publish(t *testing.T, b *bus.Bus, subject string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		id, err := publishOne(t.Context(), b, subject)
		must(t, err)
		ids = append(ids, id)
	}
	return ids
}

// publishOne publishes an envelope on subject and returns its id.
func publishOne(ctx context.Context, b *bus.Bus, subject string) (string, error) {
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "on "+subject)
	if _, err := b.Publish(ctx, subject, e); err != nil {
		return "", fmt.Errorf("publish to %s: %w", subject, err)
	}
	return e.ID, nil
}

// ringIDs returns the ids of the hub's ring, oldest first.
func ringIDs(h *hub) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, len(h.events))
	for i, e := range h.events {
		ids[i] = e.h.ID
	}
	return ids
}

// following reports whether the hub follows the bus.
func following(h *hub) bool {
	h.fmu.Lock()
	defer h.fmu.Unlock()
	return h.fol != nil
}

// quietFor makes the hub's last request idle ago and runs the idle timer's
// check now, as if the quiet period had passed.
func quietFor(h *hub) {
	h.fmu.Lock()
	h.used = time.Now().Add(-h.idle - time.Second)
	h.fmu.Unlock()
	h.checkIdle()
}

// wantRing fails t unless the hub's ring holds want, in that order, once
// each, and nothing else of the subjects' publishers (the warm-up aside).
func wantRing(t *testing.T, h *hub, want []string) {
	t.Helper()
	got := slices.DeleteFunc(ringIDs(h), func(id string) bool {
		e := h.byID(id)
		return e != nil && e.Subject == "system.warmup"
	})
	if !slices.Equal(got, want) {
		t.Fatalf("the ring holds %d envelopes %v, want %d %v", len(got), got, len(want), want)
	}
}

// TestHubFollowsOnlyWhenAsked: a sleeping hub has no subscription and no
// envelope; the first request finds every envelope published while it
// slept, in order; while it follows, one published just before a request is
// there; after the quiet period the subscriptions are gone.
func TestHubFollowsOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	h, b, base := followHub(t, 100, time.Hour)
	var want []string
	for range 3 { // IN and WORK, interleaved
		want = append(want, publish(t, b, "in.github.issues", 2)...)
		want = append(want, publish(t, b, "tool.call.everything.echo", 1)...)
	}
	if following(h) || h.count() != 0 || b.Conn().NumSubscriptions() != base {
		t.Fatalf("before any request: following %v, %d envelopes, %d subscriptions; want none and %d", following(h), h.count(), b.Conn().NumSubscriptions(), base)
	}
	must(t, h.follow(t.Context()))
	wantRing(t, h, want)
	// The hub's own subscriptions: one per subject root of the two streams.
	// (The connection's count is not compared here: the fetches that loaded
	// the ring end their inbox subscriptions from a goroutine of nats.go's
	// after the last message is handed over, so one may still be counted.)
	h.fmu.Lock()
	subs := slices.Clone(h.fol.subs)
	h.fmu.Unlock()
	var subjects []string
	for _, s := range subs {
		if s.IsValid() {
			subjects = append(subjects, s.Subject)
		}
	}
	var wantSubjects []string
	for _, root := range append([]string{"in"}, bus.WorkRoots()...) {
		wantSubjects = append(wantSubjects, b.Subject(root+".>"))
	}
	if !slices.Equal(subjects, wantSubjects) {
		t.Fatalf("following: subscribed to %v, want %v", subjects, wantSubjects)
	}

	for range 3 { // published while it follows, each asked for at once
		want = append(want, publish(t, b, "audit.tool", 1)...)
		must(t, h.follow(t.Context()))
		wantRing(t, h, want)
	}

	quietFor(h)
	if following(h) || h.count() != 0 {
		t.Fatalf("after the quiet period: following %v, %d envelopes; want none", following(h), h.count())
	}
	for _, s := range subs {
		if s.IsValid() {
			t.Errorf("the subscription to %s is still valid after the quiet period", s.Subject)
		}
	}
	// Nothing else the hub opened stays either (nats.go's fetches end their
	// own subscriptions a moment after their last message).
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("the connection back to its %d subscriptions", base), func() bool {
		return b.Conn().NumSubscriptions() == base
	})

	want = append(want, publish(t, b, "in.github.issues", 2)...)
	must(t, h.follow(t.Context()))
	wantRing(t, h, want)
}

// TestHubLoadsTheLastSize: waking, the hub holds the last size envelopes of
// the two streams together, in the order they were published.
func TestHubLoadsTheLastSize(t *testing.T) {
	t.Parallel()
	h, b, _ := followHub(t, 5, time.Hour)
	var all []string
	for range 4 {
		all = append(all, publish(t, b, "in.github.issues", 2)...)
		all = append(all, publish(t, b, "agent.step", 1)...)
	}
	must(t, h.follow(t.Context()))
	wantRing(t, h, all[len(all)-5:])
}

// TestHubSleepsAfterQuietPeriod: the idle timer stops a hub nobody asked
// for idle; a live page holds it awake past the quiet period, and once it
// leaves, the timer stops the hub.
func TestHubSleepsAfterQuietPeriod(t *testing.T) {
	t.Parallel()
	h, b, base := followHub(t, 10, 200*time.Millisecond)
	asleep := func() bool { return !following(h) && b.Conn().NumSubscriptions() == base }

	must(t, h.follow(t.Context()))
	testenv.WaitFor(t, 10*time.Second, "the hub to stop following after the quiet period", asleep)

	release, err := h.hold(t.Context())
	must(t, err)
	quietFor(h)
	if !following(h) || b.Conn().NumSubscriptions() == base {
		t.Fatal("the hub stopped following while a live page held it")
	}
	release()
	release() // a second release changes nothing
	h.fmu.Lock()
	live := h.live
	h.fmu.Unlock()
	if live != 0 {
		t.Fatalf("%d live pages after the release, want 0", live)
	}
	testenv.WaitFor(t, 10*time.Second, "the hub to stop following after the live page left", asleep)
}

// TestHubWakeNoGapNoRepeat: while one publisher publishes in IN and WORK,
// readers ask the hub for its envelopes at once, and it is put to sleep
// now and then: every envelope published before a request is in the ring
// after it, once, in the order published.
func TestHubWakeNoGapNoRepeat(t *testing.T) {
	t.Parallel()
	const total = 300
	h, b, _ := followHub(t, 10*total, time.Hour)
	var (
		pmu       sync.Mutex
		published []string
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range total {
			id, err := publishOne(t.Context(), b, []string{"in.github.issues", "agent.step", "out.github.comment"}[i%3])
			if err != nil {
				t.Error(err)
				return
			}
			pmu.Lock()
			published = append(published, id)
			pmu.Unlock()
		}
	}()
	var sleeps sync.RWMutex // readers check a ring no sleep empties meanwhile
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for stop := false; !stop; {
				select {
				case <-done:
					stop = true
				default:
				}
				sleeps.RLock()
				pmu.Lock()
				want := slices.Clone(published)
				pmu.Unlock()
				if err := h.follow(t.Context()); err != nil {
					t.Errorf("follow: %v", err)
				}
				checkRing(t, h, want)
				sleeps.RUnlock()
			}
		})
	}
	for {
		select {
		case <-done:
			wg.Wait()
			return
		case <-time.After(20 * time.Millisecond):
			sleeps.Lock()
			quietFor(h)
			sleeps.Unlock()
		}
	}
}

// checkRing fails t unless the ring holds every id of want, each once, in
// the order of want, and every envelope in it once.
func checkRing(t *testing.T, h *hub, want []string) {
	t.Helper()
	ring := ringIDs(h)
	at := make(map[string]int, len(ring))
	for i, id := range ring {
		if _, dup := at[id]; dup {
			t.Errorf("the ring holds %s twice", id)
		}
		at[id] = i
	}
	prev := -1
	for _, id := range want {
		i, ok := at[id]
		if !ok {
			t.Errorf("the ring misses %s, published before the request (%d published, %d in the ring)", id, len(want), len(ring))
			return
		}
		if i < prev {
			t.Errorf("the ring holds %s before the envelope published before it", id)
		}
		prev = i
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
