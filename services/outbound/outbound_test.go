package outbound

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/mappers/webhook"
	"github.com/relaystation/relay/secret"
)

// harness runs the worker on an embedded JetStream against local APIs.
type harness struct {
	t    testing.TB
	bus  *bus.Bus
	apis *apis
	svc  *Service
	reg  *prometheus.Registry
}

type option func(*Config)

func start(t testing.TB, opts ...option) *harness {
	t.Helper()
	whSecret, err := webhook.ParseSecret(webhook.GenerateSecret())
	if err != nil {
		t.Fatal(err)
	}
	a := newAPIs(t, whSecret)
	refs := RefBaseURL("https://relay.example.com/refs/")
	sp, err := slack.NewPoster(slack.PosterConfig{Token: secret.New("xoxb-t"), APIURL: a.URL("slack"), RefLink: refs})
	if err != nil {
		t.Fatal(err)
	}
	gc, err := github.NewCommenter(github.CommenterConfig{Token: secret.New("ghp-t"), APIURL: a.URL("github")})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sentry.NewCommenter(sentry.CommenterConfig{Token: secret.New("sntrys-t"), APIURL: a.URL("sentry")})
	if err != nil {
		t.Fatal(err)
	}
	oc, err := openproject.NewCommenter(openproject.CommenterConfig{Token: secret.New("op-t"), BaseURL: a.URL("op")})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := webhook.NewSender(webhook.SenderConfig{Secret: whSecret})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := Config{
		Slack: sp, GitHub: gc, Sentry: sc, OpenProject: oc, Webhook: ws, RefURL: refs,
		NakDelays: []time.Duration{50 * time.Millisecond}, HandlerTimeout: 10 * time.Second, ClaimLease: 20 * time.Second,
		Registerer: reg,
	}
	for _, o := range opts {
		o(&cfg)
	}
	b := bustest.Embedded(t)
	svc, err := New(t.Context(), cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, bus: b, apis: a, svc: svc, reg: reg}
	return h
}

// run starts the worker until the test ends.
func (h *harness) run() {
	testenv.Go(h.t, "Run", h.svc.Run)
}

func (h *harness) publish(e *envelope.Envelope, subject string, opts ...bus.PublishOption) {
	h.t.Helper()
	if _, err := h.bus.Publish(h.t.Context(), subject, e, opts...); err != nil {
		h.t.Fatal(err)
	}
}

func answer(t *envelope.Target, content string) *envelope.Envelope {
	e := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, content)
	e.Meta.TaskID = "2b1c3d4e-0000-4000-8000-000000000001"
	e.Meta.SetTarget(t)
	return e
}

var (
	ghTarget = &envelope.Target{Channel: "github", Owner: "octo", Repo: "hello", Number: 7}
	approval = map[string]any{"id": "ap-1", "decided_by": "U-boss", "slack_channel": "C-APPROVALS", "slack_ts": "1699999999.000100"}
)

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func (h *harness) waitDone(key string) *Record {
	h.t.Helper()
	var rec *Record
	testenv.WaitFor(h.t, 30*time.Second, "record "+key+" done", func() bool {
		r, err := h.svc.Lookup(h.t.Context(), key)
		if err != nil {
			h.t.Fatal(err)
		}
		rec = r
		return r != nil && r.State == stateDone
	})
	return rec
}

// postedOnceAfter checks that dest got one comment after failed attempts
// that the failure metric counted under reason.
func (h *harness) postedOnceAfter(dest, reason string, failed float64) {
	h.t.Helper()
	if got := h.apis.count(dest); got != 1 {
		h.t.Fatalf("got %d comments, want 1", got)
	}
	if got := value(h.svc.metrics.failed.WithLabelValues(dest, reason)); got != failed {
		h.t.Errorf("got %s metric %v, want %v", reason, got, failed)
	}
}

func (h *harness) waitDeadLetter() bus.StoredDeadLetter {
	h.t.Helper()
	var dl bus.StoredDeadLetter
	testenv.WaitFor(h.t, 30*time.Second, "a dead letter", func() bool {
		dls, err := h.bus.DeadLetters(h.t.Context(), 0)
		if err != nil {
			h.t.Fatal(err)
		}
		if len(dls) > 0 {
			dl = dls[0]
		}
		return len(dls) > 0
	})
	return dl
}

func TestPostsToEveryDestination(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		target func(h *harness) *envelope.Target
		check  func(t *testing.T, h *harness)
	}{
		{"github", func(*harness) *envelope.Target { return ghTarget }, func(t *testing.T, h *harness) {
			h.apis.mu.Lock()
			defer h.apis.mu.Unlock()
			body := h.apis.github["octo/hello#7"][0]["body"].(string)
			if !strings.Contains(body, "**Fix**: see [ref:doc-1](https://relay.example.com/refs/doc-1)") || !strings.Contains(body, "<!-- relay:out:") {
				t.Errorf("got comment %q, want the markdown with the ref link and the marker", body)
			}
		}},
		{"slack", func(*harness) *envelope.Target {
			return &envelope.Target{Channel: "slack", SlackCh: "C1", ThreadTS: "1700000000.000001"}
		}, func(t *testing.T, h *harness) {
			p := h.apis.slackPosts()[0]
			if p["channel"] != "C1" || p["thread_ts"] != "1700000000.000001" || !strings.Contains(p["text"], "*Fix*: see <https://relay.example.com/refs/doc-1|ref:doc-1>") {
				t.Errorf("got post %v, want mrkdwn with the ref link in the thread", p)
			}
		}},
		{"sentry", func(*harness) *envelope.Target {
			return &envelope.Target{Channel: "sentry", Org: "acme", IssueID: "4711"}
		}, func(t *testing.T, h *harness) {
			h.apis.mu.Lock()
			defer h.apis.mu.Unlock()
			if text := h.apis.sentry[0]["data"].(map[string]any)["text"].(string); !strings.Contains(text, "[ref:doc-1](") {
				t.Errorf("got note %q", text)
			}
		}},
		{"openproject", func(*harness) *envelope.Target {
			return &envelope.Target{Channel: "openproject", Host: "op.example.com", WorkPackageID: 42}
		}, func(t *testing.T, h *harness) {
			h.apis.mu.Lock()
			defer h.apis.mu.Unlock()
			if raw := h.apis.op[0]["comment"].(map[string]any)["raw"].(string); !strings.HasPrefix(raw, "**Fix**") {
				t.Errorf("got comment %q", raw)
			}
		}},
		{"webhook", func(h *harness) *envelope.Target {
			return &envelope.Target{Channel: "webhook", URL: h.apis.URL("hook")}
		}, func(t *testing.T, h *harness) {
			h.apis.mu.Lock()
			defer h.apis.mu.Unlock()
			if !strings.HasPrefix(h.apis.hooks[0], "out:") || len(h.apis.hookErrs) != 0 {
				t.Errorf("got webhook ids %v and verify errors %v", h.apis.hooks, h.apis.hookErrs)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := start(t)
			h.run()
			e := answer(tc.target(h), "**Fix**: see [[ref:doc-1]].")
			h.publish(e, "out."+tc.name)
			rec := h.waitDone("out:" + e.ID)
			if got := h.apis.count(tc.name); got != 1 {
				t.Fatalf("got %d posts, want 1", got)
			}
			if rec.ProviderID == "" || rec.EnvelopeID != e.ID {
				t.Errorf("got record %+v, want the provider id and envelope", rec)
			}
			tc.check(t, h)
			if got := value(h.svc.metrics.posted.WithLabelValues(tc.name)); got != 1 {
				t.Errorf("got posted metric %v, want 1", got)
			}
		})
	}
}

// TestExactlyOnce: redelivery of the same message, a double publish under
// another message id, and a second envelope with the same idempotency key
// produce one comment.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *Config) { c.Concurrency = 4 })
	first := answer(ghTarget, "Approved answer.")
	first.Meta.Set(MetaIdempotencyKey, "out:task-42")
	second := answer(ghTarget, "Approved answer.")
	second.Meta.Set(MetaIdempotencyKey, "out:task-42")
	h.publish(first, "out.github")
	h.publish(first, "out.github", bus.WithMsgID("again-"+first.ID)) // double publish
	h.publish(first, "out.github")                                   // de-duplicated by JetStream
	h.publish(second, "out.github")
	h.run()
	h.waitDone("out:task-42")
	testenv.WaitFor(t, 15*time.Second, "three messages handled", func() bool {
		return value(h.svc.metrics.duplicates.WithLabelValues(DestGitHub)) == 2
	})
	if got := h.apis.count(DestGitHub); got != 1 {
		t.Fatalf("got %d comments, want 1", got)
	}
}

// TestCrashAfterPostBeforeRecord: the worker dies after the API call and
// before it records the key (and before the ack); the redelivery finds the
// post at the provider and does not post again.
func TestCrashAfterPostBeforeRecord(t *testing.T) {
	t.Parallel()
	for _, dest := range []string{DestGitHub, DestSlack, DestSentry, DestOpenProject} {
		t.Run(dest, func(t *testing.T) {
			t.Parallel()
			h := start(t)
			var crashes atomic.Int32
			h.svc.afterPost = func(string) error {
				if crashes.Add(1) == 1 {
					return errors.New("simulated crash after the API call")
				}
				return nil
			}
			targets := map[string]*envelope.Target{
				DestGitHub:      ghTarget,
				DestSlack:       {Channel: "slack", SlackCh: "C1", ThreadTS: "1700000000.000001"},
				DestSentry:      {Channel: "sentry", IssueID: "4711"},
				DestOpenProject: {Channel: "openproject", WorkPackageID: 42},
			}
			e := answer(targets[dest], "Once only.\n\n"+strings.Repeat("word ", 10000)) // two Slack parts
			h.run()
			h.publish(e, "out."+dest)
			rec := h.waitDone("out:" + e.ID)
			want := 1
			if dest == DestSlack {
				want = len(slack.FormatParts(e.Content, nil))
				if want < 2 || len(rec.Parts) != want {
					t.Fatalf("got %d parts recorded of %d, want every part", len(rec.Parts), want)
				}
			}
			if got := h.apis.count(dest); got != want {
				t.Fatalf("got %d posts after a crash and redelivery, want %d", got, want)
			}
			if crashes.Load() < 2 {
				t.Fatalf("got %d attempts, want a redelivery", crashes.Load())
			}
		})
	}
}

// TestSlackCrashBeforeRecordingAPart: a worker posted a Slack message and
// died before recording anything; once its claim is stale, the message found
// in the thread by its metadata is not posted again.
func TestSlackCrashBeforeRecordingAPart(t *testing.T) {
	t.Parallel()
	h := start(t)
	target := &envelope.Target{Channel: "slack", SlackCh: "C1", ThreadTS: "1700000000.000001"}
	e := answer(target, "Posted by a worker that then died.")
	key := "out:" + e.ID
	if _, err := h.svc.slack.PostMarkdown(t.Context(), "C1", e.Content, slack.PostOptions{ThreadTS: target.ThreadTS, Key: key}); err != nil {
		t.Fatal(err)
	}
	stale, _ := json.Marshal(Record{Key: key, State: statePending, EnvelopeID: e.ID, StreamSeq: 999, Owner: "dead", ClaimedAt: time.Now().Add(-time.Hour)})
	if _, err := h.svc.kv.Create(t.Context(), BucketKey(key), stale); err != nil {
		t.Fatal(err)
	}
	h.run()
	h.publish(e, "out.slack")
	rec := h.waitDone(key)
	if got := len(h.apis.slackPosts()); got != 1 || len(rec.Parts) != 1 {
		t.Fatalf("got %d messages and parts %v, want the one message found, not reposted", got, rec.Parts)
	}
}

// TestRateLimitHonoursRetryAfter: a 429 with Retry-After: 1 is retried after
// about a second, not after the (much longer) configured backoff.
func TestRateLimitHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *Config) { c.NakDelays = []time.Duration{time.Minute} })
	h.apis.enqueue("github:POST", mapperstest.Answer(429, `{"message":"slow down"}`, "Retry-After", "1"))
	e := answer(ghTarget, "Rate limited once.")
	h.run()
	h.publish(e, "out.github")
	h.waitDone("out:" + e.ID)
	calls := h.apis.callTimes("github:POST")
	if len(calls) != 2 {
		t.Fatalf("got %d create calls, want 2", len(calls))
	}
	if gap := calls[1].Sub(calls[0]); gap < 900*time.Millisecond || gap > 20*time.Second {
		t.Fatalf("got %s between attempts, want about the Retry-After of 1s", gap)
	}
	h.postedOnceAfter(DestGitHub, "rate_limited", 1)
}

func TestServerErrorsRetried(t *testing.T) {
	t.Parallel()
	h := start(t)
	h.apis.enqueue("sentry:POST", mapperstest.Answer(502, `bad gateway`), mapperstest.Answer(503, `{"detail":"down"}`))
	e := answer(&envelope.Target{Channel: "sentry", IssueID: "4711"}, "After two 5xx.")
	h.run()
	h.publish(e, "out.sentry")
	h.waitDone("out:" + e.ID)
	h.postedOnceAfter(DestSentry, "transient", 2)
}

// TestSlackPartialFailureResumes: part 2 of a long answer fails once; the
// retry posts parts 2.. only.
func TestSlackPartialFailureResumes(t *testing.T) {
	t.Parallel()
	h := start(t)
	e := answer(&envelope.Target{Channel: "slack", SlackCh: "C7"}, strings.Repeat("A long answer line. ", 6000))
	parts := len(slack.FormatParts(e.Content, nil))
	if parts < 3 {
		t.Fatalf("got %d parts, want a longer answer", parts)
	}
	h.apis.failCall("slack:chat.postMessage", 2, mapperstest.Answer(500, `oops`))
	h.run()
	h.publish(e, "out.slack")
	h.waitDone("out:" + e.ID)
	if got := len(h.apis.slackPosts()); got != parts {
		t.Fatalf("got %d messages, want %d (no part twice)", got, parts)
	}
}

// TestNotFoundDeadLetteredWithSlackNotice: a 404 is permanent: the message
// is dead-lettered and the approval thread is told.
func TestNotFoundDeadLetteredWithSlackNotice(t *testing.T) {
	t.Parallel()
	h := start(t)
	e := answer(&envelope.Target{Channel: "github", Owner: "octo", Repo: "nope", Number: 7}, "Nobody will see this.")
	e.Meta.Set(MetaApproval, approval)
	h.run()
	h.publish(e, "out.github")
	dl := h.waitDeadLetter()
	if dl.Consumer != "outbound" || !strings.Contains(dl.Reason, "404") || dl.Deliveries != 1 {
		t.Fatalf("got dead letter %+v, want outbound's, naming 404, after one delivery", dl)
	}
	testenv.WaitFor(t, 10*time.Second, "the Slack notice", func() bool { return len(h.apis.slackPosts()) == 1 })
	p := h.apis.slackPosts()[0]
	want := "Posting to GitHub octo/nope#7 failed: 404 Not Found"
	if p["channel"] != "C-APPROVALS" || p["thread_ts"] != "1699999999.000100" || !strings.Contains(p["text"], want) {
		t.Fatalf("got notice %v, want %q in the approval thread", p, want)
	}
	// A replay after the cause is fixed may post: the key is not burnt.
	rec, err := h.svc.Lookup(t.Context(), "out:"+e.ID)
	if err != nil || rec == nil || rec.State != stateFailed {
		t.Fatalf("got record %+v, %v, want failed", rec, err)
	}
}

func TestUnconfiguredDestinationDeadLettered(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *Config) {
		c.Sentry = nil
		c.Missing = map[string]string{DestSentry: "SENTRY_TOKEN is not set"}
	})
	e := answer(&envelope.Target{Channel: "sentry", IssueID: "4711"}, "x")
	e.Meta.Set(MetaApproval, approval)
	h.run()
	h.publish(e, "out.sentry")
	dl := h.waitDeadLetter()
	if !strings.Contains(dl.Reason, "SENTRY_TOKEN") {
		t.Fatalf("got reason %q, want it to name SENTRY_TOKEN", dl.Reason)
	}
	testenv.WaitFor(t, 10*time.Second, "the Slack notice", func() bool { return len(h.apis.slackPosts()) == 1 })
	if text := h.apis.slackPosts()[0]["text"]; !strings.Contains(text, "sentry is not configured: SENTRY_TOKEN is not set") {
		t.Fatalf("got notice %q", text)
	}
}

func TestBadTargetsDeadLettered(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		target *envelope.Target
		reason string
	}{
		{"no target", nil, "no meta.target"},
		{"incomplete", &envelope.Target{Channel: "github", Owner: "octo"}, "owner, repo and number"},
		{"unknown channel", &envelope.Target{Channel: "fax"}, "fax"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := start(t)
			e := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, "x")
			if tc.target != nil {
				e.Meta.SetTarget(tc.target)
			}
			h.run()
			h.publish(e, "out.github")
			if dl := h.waitDeadLetter(); !strings.Contains(dl.Reason, tc.reason) {
				t.Fatalf("got reason %q, want %q", dl.Reason, tc.reason)
			}
		})
	}
}

func TestNoticeGoesToSlackThread(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name           string
		build          func(e *envelope.Envelope)
		channel, inThr string
	}{
		{"thread key", func(e *envelope.Envelope) { e.Meta.Thread = "slack:T1/C5/1700000000.000009" }, "C5", "1700000000.000009"},
		{"approval", func(e *envelope.Envelope) {
			e.Meta.Thread = envelope.GitHubThread("octo", "hello", 7)
			e.Meta.Set(MetaApproval, approval)
		}, "C-APPROVALS", "1699999999.000100"},
		{"slash command thread", func(e *envelope.Envelope) { e.Meta.Thread = "slack:T1/C6/cmd-123.456" }, "C6", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := start(t)
			e := envelope.New(envelope.ChannelInternal, envelope.RoleSystem, "The LLM endpoint is down; task stopped.")
			tc.build(e)
			h.run()
			h.publish(e, SubjectNotice)
			h.waitDone("notice:" + e.ID)
			p := h.apis.slackPosts()[0]
			if p["channel"] != tc.channel || p["thread_ts"] != tc.inThr || !strings.Contains(p["text"], "LLM endpoint is down") {
				t.Fatalf("got %v, want channel %s thread %q", p, tc.channel, tc.inThr)
			}
		})
	}
}

func TestRenderRefs(t *testing.T) {
	t.Parallel()
	r := RefBaseURL("https://r.io/refs/")
	cases := map[string]string{
		"see [[ref:a1]].":          "see [ref:a1](https://r.io/refs/a1).",
		"[[ref:a b]] stays":        "[[ref:a b]] stays",
		"two [[ref:x]][[ref:y/z]]": "two [ref:x](https://r.io/refs/x)[ref:y/z](https://r.io/refs/y%2Fz)",
		"none":                     "none",
	}
	for in, want := range cases {
		if got := RenderRefs(in, r); got != want {
			t.Errorf("RenderRefs(%q): got %q, want %q", in, got, want)
		}
	}
	if got := RenderRefs("[[ref:x]]", nil); got != "[[ref:x]]" {
		t.Errorf("got %q without a resolver", got)
	}
}

func TestReason(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want string
	}{
		{&github.PostError{Status: 404}, "404 Not Found"},
		{&slack.PostError{Code: "channel_not_found"}, "channel_not_found"},
		{&sentry.PostError{Provider: "sentry", Status: 403, Message: "no access"}, "403 Forbidden (no access)"},
		{&openproject.PostError{Provider: "openproject", Status: 422, Message: "Comment can't be blank."}, "422 Unprocessable Entity (Comment can't be blank.)"},
		{&webhook.SendError{Status: 410}, "410 Gone"},
		{errors.New("plain"), "plain"},
		{fmt.Errorf("post e1 to webhook: %w", bus.Permanent(ErrEmpty)), ErrEmpty.Error()},
	}
	for _, tc := range cases {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("Reason(%v): got %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := Config{HandlerTimeout: time.Minute, ClaimLease: time.Minute}
	cfg.setDefaults()
	if err := cfg.Validate(); err == nil {
		t.Fatal("got nil, want an error for a lease not above the handler timeout")
	}
}
