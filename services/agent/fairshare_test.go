package agent

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fairshare"
	"github.com/relaystation/relay/internal/testenv"
)

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// issueIn is an issues.opened trigger for issue n of repo.
func issueIn(repo string, n int) *envelope.Envelope {
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser,
		fmt.Sprintf("mallory opened issue #%d in %s: spam %d\n\nbuy now", n, repo, n))
	e.Meta.Thread = fmt.Sprintf("github:%s#%d", repo, n)
	e.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", DeliveryID: fmt.Sprintf("d-%s-%d", repo, n),
		URL: fmt.Sprintf("https://github.com/%s/issues/%d", repo, n), Actor: "mallory"}
	return e
}

// A flood of triggers for one repository starts at most the limit's tasks in
// a window, says so in one notice, leaves other repositories alone, and
// collects the rest into one digest task after the window (started by any
// agent process).
func TestFloodOfOneRepositoryIsLimitedAndDigested(t *testing.T) {
	t.Parallel()
	clk := &testClock{t: time.Date(2026, 12, 2, 12, 0, 5, 0, time.UTC)}
	const limit, flood = 3, 12
	h := setup(t, []reply{say("Thanks, we will look into it.")}, withConfig(func(c *Config) {
		c.Limits = Limits{PerRepository: limit, Window: time.Hour}
		c.now = clk.now
	}))
	for i := range flood {
		h.publish(t, "in.github.issues", issueIn("mallory/spam", i+1))
	}
	h.drained(t, ConsumerInbound, envelope.SubjectInbound+".x")
	var suggestions, notices int
	for range limit + 1 {
		e := h.next(t)
		switch e.Role {
		case envelope.RoleAssistant:
			suggestions++
		case envelope.RoleSystem:
			notices++
			var n map[string]any
			if ok, err := e.Meta.Decode("notice", &n); !ok || err != nil || n["kind"] != "limit" || n["source"] != "github:mallory/spam" {
				t.Errorf("got notice meta %v, want kind limit for github:mallory/spam", n)
			}
		}
	}
	h.none(t)
	if suggestions != limit || notices != 1 || h.llm.count() != limit {
		t.Fatalf("got %d suggestions, %d notices, %d model calls, want %d, 1, %d", suggestions, notices, h.llm.count(), limit, limit)
	}

	// Another repository is answered at once.
	h.publish(t, "in.github.issues", issueIn("octo/hello", 1))
	if e := h.next(t); e.Role != envelope.RoleAssistant || e.Meta.Thread != "github:octo/hello#1" {
		t.Fatalf("got %s on %s, want a suggestion on github:octo/hello#1", e.Role, e.Meta.Thread)
	}

	// After the window, another agent process publishes the one digest.
	clk.add(time.Hour + fairshare.Grace)
	other := h.idle(t, 0)
	other.cfg.Limits, other.cfg.now = h.cfg.Limits, clk.now
	l, err := fairshare.Open(t.Context(), h.b, h.b.Prefix(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l.SetClock(clk.now)
	other.limiter = l
	testenv.WaitFor(t, 10*time.Second, "the deferred triggers in the digest", func() bool {
		due, err := l.Due(t.Context())
		return err == nil && len(due) == 1 && due[0].Count == flood-limit
	})
	other.publishDigests(t.Context())
	e := h.next(t)
	// Handlers run concurrently: which issues were deferred is not fixed,
	// only how many.
	if e.Role != envelope.RoleAssistant || !strings.HasPrefix(e.Meta.Thread, "github:mallory/spam#") {
		t.Fatalf("got %s on %s, want the digest's suggestion on a deferred issue's thread", e.Role, e.Meta.Thread)
	}
	reqs := h.llm.requests()
	last := reqs[len(reqs)-1].Messages
	if got := fmt.Sprint(last[len(last)-1].Content); !strings.Contains(got, fmt.Sprintf("%d events from github:mallory/spam", flood-limit)) ||
		strings.Count(got, "\n- ") != flood-limit {
		t.Errorf("got digest task %q, want the %d deferred events in it", got, flood-limit)
	}
	other.publishDigests(t.Context())
	h.none(t)
	if got := h.llm.count(); got != limit+2 {
		t.Fatalf("got %d model calls, want %d (the limit, the other repository, one digest)", got, limit+2)
	}
}
