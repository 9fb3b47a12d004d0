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
	stopDrain := make(chan struct{})
	defer close(stopDrain)
	for _, ch := range []<-chan *envelope.Envelope{r.executed, r.calls} {
		go func() {
			for {
				select {
				case <-ch:
				case <-stopDrain:
					return
				}
			}
		}()
	}
	nc := r.b.Conn()
	done := make(chan string, 16)
	sub, err := nc.Subscribe(r.b.Subject(hooks.SubjectExecuted), func(m *nats.Msg) {
		var e struct {
			Meta struct {
				X struct {
					EnvelopeID string `json:"envelope_id"`
				} `json:"hook_execution"`
			} `json:"meta"`
		}
		_ = json.Unmarshal(m.Data, &e)
		done <- e.Meta.X.EnvelopeID
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	results := make(chan string, 16)
	rsub, err := nc.Subscribe(r.b.Subject(envelope.SubjectToolResult), func(m *nats.Msg) {
		var e struct {
			Meta struct {
				InReplyTo string `json:"in_reply_to"`
			} `json:"meta"`
		}
		_ = json.Unmarshal(m.Data, &e)
		results <- e.Meta.InReplyTo
	})
	if err != nil {
		b.Fatal(err)
	}
	defer rsub.Unsubscribe()
	wait := func(ch chan string, id string) {
		for {
			select {
			case got := <-ch:
				if got == id {
					return
				}
			case <-time.After(30 * time.Second):
				b.Fatalf("no answer for %s within 30s", id)
			}
		}
	}
	var hook, raw []time.Duration
	ctx := b.Context()
	for b.Loop() {
		e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "Codertocat opened issue #1")
		e.Meta.Thread = "github:Codertocat/Hello-World#1"
		e.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", Actor: "Codertocat", URL: "https://github.com/Codertocat/Hello-World/issues/1"}
		begin := time.Now()
		if _, err := r.b.Publish(ctx, "in.github.issues", e); err != nil {
			b.Fatal(err)
		}
		wait(done, e.ID)
		hook = append(hook, time.Since(begin))

		call := envelope.New(envelope.ChannelGitHub, envelope.RoleAssistant, "raw call")
		call.ToolCall = &envelope.ToolCall{ID: call.ID, Name: "everything.echo", Args: map[string]any{"message": "raw"}}
		call.Meta.Set("agent", map[string]any{"id": "bench", "role": "hooks"})
		begin = time.Now()
		if _, err := r.b.Publish(ctx, envelope.SubjectToolCall, call); err != nil {
			b.Fatal(err)
		}
		wait(results, call.ID)
		raw = append(raw, time.Since(begin))
	}
	pct := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(float64(len(s))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(hook, 0.5), "hook-p50-ms")
	b.ReportMetric(pct(hook, 0.99), "hook-p99-ms")
	b.ReportMetric(pct(raw, 0.5), "raw-p50-ms")
	b.ReportMetric(pct(raw, 0.99), "raw-p99-ms")
}
