package approvals_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/approvals"
)

// BenchmarkSuggestionToPosted measures one hop of the loop: an
// agent.suggestion published on JetStream until the approval message reaches
// (a local fake of) chat.postMessage. It reports p50/p99 of that latency, one
// suggestion at a time, and paced at 100 suggestions per second.
func BenchmarkSuggestionToPosted(b *testing.B) {
	for _, rate := range []int{0, 100} {
		name := "sequential"
		if rate > 0 {
			name = "100per_s"
		}
		b.Run(name, func(b *testing.B) {
			bb := bustest.Embedded(b)
			fake := fakes.NewSlack(b)
			posted := make(chan fakes.SlackCall, 1024)
			fake.OnCall(func(c fakes.SlackCall) {
				if c.Method == "chat.postMessage" {
					posted <- c
				}
			})
			svc, err := approvals.New(b.Context(), approvals.Config{
				BotToken: secret.New("xoxb-bench"), APIURL: fake.URL(), Channel: approvalCh, Approvers: []string{approver},
				Concurrency: 16, SweepInterval: time.Hour,
			}, bb, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- svc.Run(ctx) }()
			defer func() { cancel(); <-done }()

			var mu sync.Mutex
			sent := map[string]time.Time{}
			lat := make([]time.Duration, 0, b.N)
			got := make(chan struct{})
			go func() {
				for n := 0; n < b.N; n++ {
					c := <-posted
					task := buttons(b, c)[approvals.ActionApprove]
					mu.Lock()
					lat = append(lat, time.Since(sent[task]))
					mu.Unlock()
					if rate == 0 {
						got <- struct{}{}
					}
				}
				close(got)
			}()
			target := github7
			b.ResetTimer()
			tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
			defer tick.Stop()
			for range b.N {
				id := uuid.NewString()
				e := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, "answer "+id)
				e.Meta.TaskID = id
				e.Meta.SetTarget(&target)
				mu.Lock()
				sent[id] = time.Now()
				mu.Unlock()
				if _, err := bb.Publish(b.Context(), approvals.SubjectSuggestion, e); err != nil {
					b.Fatal(err)
				}
				if rate == 0 {
					<-got
				} else {
					<-tick.C
				}
			}
			for range got {
			}
			b.StopTimer()
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
				b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99_ms")
			}
		})
	}
}
