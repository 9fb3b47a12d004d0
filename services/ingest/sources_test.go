package ingest_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/services/ingest"
)

// slowSource is a bus whose publishes of one repository wait until release
// (whatever their context says: the gateway's per-attempt timeout must not
// end the wait): a source whose webhooks pile up in the gateway.
type slowSource struct {
	*bus.Bus
	repo    string
	open    chan struct{}
	once    sync.Once
	waiting atomic.Int64
}

func (s *slowSource) release() { s.once.Do(func() { close(s.open) }) }

func (s *slowSource) Publish(ctx context.Context, subject string, e *envelope.Envelope, opts ...bus.PublishOption) (bus.PublishResult, error) {
	if strings.HasPrefix(e.Meta.Thread, "github:"+s.repo+"#") {
		s.waiting.Add(1)
		<-s.open
		ctx = context.WithoutCancel(ctx)
	}
	return s.Bus.Publish(ctx, subject, e, opts...)
}

func issueOpened(repo string, n int) []byte {
	return fmt.Appendf(nil, `{"action":"opened","issue":{"number":%d,"title":"t","body":"b","user":{"login":"u"}},"repository":{"full_name":%q},"sender":{"login":"u"}}`, n, repo)
}

// TestSourceInflightLimit: once a repository has MaxInflightPerSource
// webhooks publishing, its next one is answered 503 with Retry-After at once
// (it neither waits nor holds the gateway's memory), while another
// repository's webhook is accepted beside them; the held ones still
// complete.
func TestSourceInflightLimit(t *testing.T) {
	t.Parallel()
	b := &slowSource{Bus: bustest.Embedded(t), repo: "o/flood", open: make(chan struct{})}
	t.Cleanup(b.release)
	gw := startGateway(t, b, ingest.Config{MaxInflightPerSource: 2}, githubProvider())
	held := make(chan int, 2)
	for i := range 2 {
		go func() {
			code, _ := do(t, githubRequest(t, gw.url, "issues", fmt.Sprintf("flood-%d", i), issueOpened("o/flood", i+1)))
			held <- code
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "two webhooks of o/flood publishing", func() bool { return b.waiting.Load() == 2 })

	third := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(githubRequest(t, gw.url, "issues", "flood-3", issueOpened("o/flood", 3)))
		if err != nil {
			t.Error(err)
			resp = nil
		} else {
			resp.Body.Close()
		}
		third <- resp
	}()
	select {
	case resp := <-third:
		if resp != nil && (resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "") {
			t.Errorf("third webhook of o/flood: got %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	case <-time.After(10 * time.Second):
		b.release()
		t.Fatal("third webhook of o/flood waits behind its source's publishes, want 503 at once")
	}
	if code, msg := do(t, githubRequest(t, gw.url, "issues", "other-1", issueOpened("o/other", 1))); code != http.StatusOK {
		t.Errorf("webhook of o/other beside the flood: got %d %q, want 200", code, msg)
	}
	b.release()
	for range 2 {
		if code := <-held; code != http.StatusOK {
			t.Errorf("held webhook of o/flood: got %d, want 200 once published", code)
		}
	}
	if n := storedIn(t, b.Bus); n != 3 {
		t.Errorf("inbound stream holds %d messages, want 3 (two of o/flood, one of o/other)", n)
	}
	// The slots are given back: o/flood is accepted again.
	if code, msg := do(t, githubRequest(t, gw.url, "issues", "flood-4", issueOpened("o/flood", 4))); code != http.StatusOK {
		t.Errorf("webhook of o/flood after its publishes ended: got %d %q, want 200", code, msg)
	}
}
