package hooks_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/services/hooks"
)

// BenchmarkHookLatency measures, against a real tool runner and
// server-everything over stdio, the time from an inbound envelope stored in
// JetStream (when the gateway answers the webhook) to the hook's execution
// record (the echo tool's result in hand), and beside it the raw tool-runner
// round trip (tool.call published to tool.result received) in the same run.
// It reports p50 and p99 of each.
func BenchmarkHookLatency(b *testing.B) {
	r := start(b, `
hooks:
  - name: bench
    on: ["github.issues.opened"]
    actions:
      - type: mcp
        parameters:
          serverId: everything
          toolName: echo
          parameterMappings: [{toolParam: message, source: template, value: "{{.actor}} opened {{.url}}"}]
`)
	// The rig's observers buffer 64 envelopes; keep them flowing.
	drain(b, r.executed, r.calls)
	executed := subscribeIDs(b, r.b.Conn(), r.b.Subject(hooks.SubjectExecuted), executedEnvelopeID)
	results := subscribeIDs(b, r.b.Conn(), r.b.Subject(envelope.SubjectToolResult), inReplyTo)
	var hook, raw []time.Duration
	ctx := b.Context()
	for b.Loop() {
		e := issueOpenedEnvelope()
		hook = append(hook, roundTrip(b, executed, e.ID, func() error {
			_, err := r.b.Publish(ctx, "in.github.issues", e)
			return err
		}))

		call := echoCall()
		raw = append(raw, roundTrip(b, results, call.ID, func() error {
			_, err := r.b.Publish(ctx, envelope.SubjectToolCall, call)
			return err
		}))
	}
	reportPercentiles(b, "hook", hook)
	reportPercentiles(b, "raw", raw)
}

// drain discards what arrives on chs until the benchmark ends.
func drain(b *testing.B, chs ...<-chan *envelope.Envelope) {
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop) })
	for _, ch := range chs {
		go func() {
			for {
				select {
				case <-ch:
				case <-stop:
					return
				}
			}
		}()
	}
}

// subscribeIDs subscribes to subject until the benchmark ends and sends the
// id that id finds in each message.
func subscribeIDs(b *testing.B, nc *nats.Conn, subject string, id func(data []byte) string) <-chan string {
	ids := make(chan string, 16)
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { ids <- id(m.Data) })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	return ids
}

// executedEnvelopeID is the inbound envelope id of a hook.executed record.
func executedEnvelopeID(data []byte) string {
	var e struct {
		Meta struct {
			X struct {
				EnvelopeID string `json:"envelope_id"`
			} `json:"hook_execution"`
		} `json:"meta"`
	}
	_ = json.Unmarshal(data, &e)
	return e.Meta.X.EnvelopeID
}

// inReplyTo is the id of the tool call a tool.result answers.
func inReplyTo(data []byte) string {
	var e struct {
		Meta struct {
			InReplyTo string `json:"in_reply_to"`
		} `json:"meta"`
	}
	_ = json.Unmarshal(data, &e)
	return e.Meta.InReplyTo
}

// issueOpenedEnvelope is an inbound issues.opened envelope the bench hook matches.
func issueOpenedEnvelope() *envelope.Envelope {
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "Codertocat opened issue #1")
	e.Meta.Thread = "github:Codertocat/Hello-World#1"
	e.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", Actor: "Codertocat", URL: "https://github.com/Codertocat/Hello-World/issues/1"}
	return e
}

// echoCall is a tool.call of everything.echo made directly, as the hooks role.
func echoCall() *envelope.Envelope {
	call := envelope.New(envelope.ChannelGitHub, envelope.RoleAssistant, "raw call")
	call.ToolCall = &envelope.ToolCall{ID: call.ID, Name: "everything.echo", Args: map[string]any{"message": "raw"}}
	call.Meta.Set("agent", map[string]any{"id": "bench", "role": "hooks"})
	return call
}

// roundTrip times publish until id arrives on ids, failing after 30s.
func roundTrip(b *testing.B, ids <-chan string, id string, publish func() error) time.Duration {
	begin := time.Now()
	if err := publish(); err != nil {
		b.Fatal(err)
	}
	for {
		select {
		case got := <-ids:
			if got == id {
				return time.Since(begin)
			}
		case <-time.After(30 * time.Second):
			b.Fatalf("no answer for %s within 30s", id)
		}
	}
}

// reportPercentiles reports the p50 and p99 of d in milliseconds as
// name-p50-ms and name-p99-ms.
func reportPercentiles(b *testing.B, name string, d []time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	pct := func(p float64) float64 {
		return float64(s[min(len(s)-1, int(float64(len(s))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.5), name+"-p50-ms")
	b.ReportMetric(pct(0.99), name+"-p99-ms")
}
