package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/services/ingest"
)

// recorder is a Publisher that keeps every envelope it is handed, with its
// JSON at that moment.
type recorder struct {
	mu   sync.Mutex
	envs map[string]*envelope.Envelope // by delivery id
	json map[string][]byte
}

func (r *recorder) Publish(_ context.Context, _ string, e *envelope.Envelope, _ ...bus.PublishOption) (bus.PublishResult, error) {
	data, err := e.Marshal()
	if err != nil {
		return bus.PublishResult{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.envs[e.Meta.Source.DeliveryID], r.json[e.Meta.Source.DeliveryID] = e, data
	return bus.PublishResult{}, nil
}

// TestBodyBuffersReused: the gateway reads bodies into pooled buffers and
// reuses each once its request is answered. Concurrent webhooks of sizes
// across the pooled sizes each become their own envelope, and no envelope
// changes after its webhook was answered (nothing of it points into a
// reused buffer).
func TestBodyBuffersReused(t *testing.T) {
	t.Parallel()
	rec := &recorder{envs: map[string]*envelope.Envelope{}, json: map[string][]byte{}}
	gw := startGateway(t, rec, ingest.Config{}, githubProvider())
	base := readFixture(t, "mappers", "github", "testdata", "payloads", "issues.opened.json")
	const workers, each = 8, 16
	reqs := make([][]*http.Request, workers)
	for w := range workers {
		for i := range each {
			id := fmt.Sprintf("reuse-%d-%d", w, i)
			body := withField(t, base, id+" "+strings.Repeat("t", (w*each+i)*400), "issue", "title")
			reqs[w] = append(reqs[w], githubRequest(t, gw.url, "issues", id, body))
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for _, req := range reqs[w] {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("%s: %v", req.Header.Get("X-GitHub-Delivery"), err)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s: got %d, want 200", req.Header.Get("X-GitHub-Delivery"), resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.envs) != workers*each {
		t.Fatalf("got %d envelopes, want %d", len(rec.envs), workers*each)
	}
	for id, e := range rec.envs {
		if !strings.Contains(e.Content, id+" ") {
			t.Errorf("%s: envelope content %.60q is not its webhook's", id, e.Content)
		}
		now, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(now, rec.json[id]) {
			t.Errorf("%s: the envelope changed after its webhook was answered", id)
		}
	}
}
