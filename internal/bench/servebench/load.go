package servebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/internal/bench/ingestbench"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/mappers/github"
)

// sentinel stands for the issue number in template.
const sentinel = "987654321"

// hotIssue is the issue every webhook of a hot-thread target is about.
const hotIssue = 1

// template is the real `issues` `opened` payload with the issue number
// replaced by sentinel.
var template = func() []byte {
	var p map[string]any
	if err := json.Unmarshal(ingestbench.Payload(), &p); err != nil {
		panic(err)
	}
	p["issue"].(map[string]any)["number"] = json.Number(sentinel)
	out, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return out
}()

// body is the payload about issue n.
func body(n int) []byte {
	return bytes.Replace(template, []byte(sentinel), []byte(strconv.Itoa(n)), 1)
}

// sender posts signed webhooks to a child and records when each issue's
// webhook was accepted and when its suggestion reached Slack.
type sender struct {
	client   *http.Client
	url      string
	hot      bool
	hotBody  []byte
	hotSig   string
	seq      atomic.Int64
	mu       sync.Mutex
	accepted map[int]time.Time
	arrived  map[int]time.Time
}

func newSender(base string, hot bool) *sender {
	s := &sender{
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		}},
		url: base + "/webhooks/github", hot: hot,
		accepted: map[int]time.Time{}, arrived: map[int]time.Time{},
	}
	s.hotBody = body(hotIssue)
	s.hotSig = github.Sign([]byte(webhookSecret), s.hotBody)
	return s
}

// send posts the next webhook: about hotIssue, or about an issue of its own.
func (s *sender) send(ctx context.Context) error {
	n, b, sig := hotIssue, s.hotBody, s.hotSig
	if !s.hot {
		n = 100_000 + int(s.seq.Add(1))
		b = body(n)
		sig = github.Sign([]byte(webhookSecret), b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	github.SetHeaders(req.Header, "issues", uuid.NewString(), "1", sig)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("webhook answered %d, want 200", resp.StatusCode)
	}
	s.mark(s.accepted, n)
	return nil
}

// issueRef finds the issue number in an approval message.
var issueRef = regexp.MustCompile(`#(\d+)`)

// onSlack records the first approval message about each issue.
func (s *sender) onSlack(c fakes.SlackCall) {
	if c.Method != "chat.postMessage" || c.Params["channel"] != approvalChannel {
		return
	}
	if m := issueRef.FindStringSubmatch(c.Params["text"]); m != nil {
		n, _ := strconv.Atoi(m[1])
		s.mark(s.arrived, n)
	}
}

func (s *sender) mark(at map[int]time.Time, n int) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := at[n]; !dup {
		at[n] = now
	}
}

// unanswered returns up to n accepted issues, lowest first, whose suggestion
// has not arrived.
func (s *sender) unanswered(n int) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for i := range s.accepted {
		if _, ok := s.arrived[i]; !ok {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out[:min(n, len(out))]
}

// loop returns the suggestions that arrived and the acceptance-to-suggestion
// latencies of the issues whose both ends are known.
func (s *sender) loop() (int, []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lat []time.Duration
	for n, t1 := range s.arrived {
		if t0, ok := s.accepted[n]; ok {
			lat = append(lat, t1.Sub(t0))
		}
	}
	return len(s.arrived), lat
}
