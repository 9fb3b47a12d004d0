package story_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/story"
	"github.com/relaystation/relay/internal/testenv"
)

// loop publishes the envelopes of one webhook's story the way the services
// do, and returns the inbound envelope.
func loop(t testing.TB, b *bus.Bus, delivery, thread string) *envelope.Envelope {
	t.Helper()
	in := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "Crash on start\nstack...")
	in.Meta.Thread = thread
	in.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", DeliveryID: delivery,
		URL: "https://github.com/o/r/issues/1", Actor: "octocat"}
	pub(t, b, "in.github.issues", in, bus.WithMsgID("github:"+delivery))
	task := envelope.TaskOf(in.ID)
	step := func(subject, content string, set func(e *envelope.Envelope)) {
		e := envelope.New(envelope.ChannelInternal, envelope.RoleAssistant, content)
		e.Meta.Thread, e.Meta.TaskID, e.Meta.Source = thread, task, in.Meta.Source
		if set != nil {
			set(e)
		}
		pub(t, b, subject, e)
	}
	step(story.SubjectModelCall, "model call", func(e *envelope.Envelope) {
		e.Meta.Set(story.MetaModelCall, story.ModelCall{Model: "m1", Step: 1, PromptTokens: 120, CompletionTokens: 30,
			DurationMS: 250, ToolCalls: []string{"everything.echo"}})
	})
	step(envelope.SubjectToolCall, "", func(e *envelope.Envelope) {
		e.ToolCall = &envelope.ToolCall{ID: "c1", Name: "everything.echo", Args: map[string]any{"message": "hi"}}
	})
	step(envelope.SubjectToolResult, "", func(e *envelope.Envelope) {
		e.Role = envelope.RoleTool
		e.ToolCall = &envelope.ToolCall{ID: "c1", Name: "everything.echo", Result: map[string]any{"text": "hi"}}
	})
	step("agent.suggestion", "Try restarting.", nil)
	step("approval.decided", "approved", func(e *envelope.Envelope) {
		e.Role = envelope.RoleSystem
		e.Meta.Set("approval", map[string]any{"status": "approved", "decided_by": "U42", "edited_by": "U42"})
	})
	step("out.github", "Try restarting, edited.", nil)
	step(story.SubjectPosted, "posted", func(e *envelope.Envelope) {
		e.Role = envelope.RoleSystem
		e.Meta.Set(story.MetaPosted, story.Posted{Target: "github o/r#1", ProviderID: "77",
			URL: "https://github.com/o/r/issues/1#issuecomment-77", DurationMS: 40})
	})
	return in
}

func pub(t testing.TB, b *bus.Bus, subject string, e *envelope.Envelope, opts ...bus.PublishOption) {
	t.Helper()
	if _, err := b.Publish(t.Context(), subject, e, opts...); err != nil {
		t.Fatal(err)
	}
}

func kinds(s *story.Story) []string {
	var k []string
	for _, h := range s.Hops {
		k = append(k, h.Kind)
	}
	return k
}

func TestBuild(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	loop(t, b, "d-other", "github:o/r#2")
	in := loop(t, b, "d-1", "github:o/r#1")
	task := envelope.TaskOf(in.ID)
	want := []string{"webhook", "model_call", "tool_call", "tool_result", "suggestion", "approval", "outbound", "outbound"}
	for _, tc := range []struct{ name, id string }{
		{"delivery", "d-1"}, {"thread", "github:o/r#1"}, {"task", task},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := story.Build(t.Context(), b, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if got := kinds(s); !slices.Equal(got, want) {
				t.Fatalf("got kinds %v, want %v", got, want)
			}
			if s.Thread != "github:o/r#1" || !slices.Equal(s.Tasks, []string{task}) || !slices.Equal(s.Deliveries, []string{"d-1"}) {
				t.Errorf("got thread %q tasks %v deliveries %v", s.Thread, s.Tasks, s.Deliveries)
			}
			checkHops(t, s)
		})
	}
}

func checkHops(t *testing.T, s *story.Story) {
	t.Helper()
	for i, h := range s.Hops {
		if i > 0 && (h.Time.Before(s.Hops[i-1].Time) || h.Since != h.Time.Sub(s.Hops[i-1].Time)) {
			t.Errorf("hop %d: time %s since %s after %s", i, h.Time, h.Since, s.Hops[i-1].Time)
		}
		if h.Summary == "" || len(h.Envelope) == 0 {
			t.Errorf("hop %d (%s): summary %q, %d bytes of envelope", i, h.Kind, h.Summary, len(h.Envelope))
		}
	}
	first, mc, ap, posted := s.Hops[0], s.Hops[1], s.Hops[5], s.Hops[7]
	if first.Actor != "octocat" || first.Link != "https://github.com/o/r/issues/1" {
		t.Errorf("webhook hop: got actor %q link %q", first.Actor, first.Link)
	}
	if mc.Tokens == nil || *mc.Tokens != (story.Tokens{Prompt: 120, Completion: 30}) || mc.Duration != 250*time.Millisecond {
		t.Errorf("model call hop: got tokens %+v duration %s", mc.Tokens, mc.Duration)
	}
	if ap.Actor != "U42" || ap.Summary != "approved by U42, edited by U42" {
		t.Errorf("approval hop: got actor %q summary %q", ap.Actor, ap.Summary)
	}
	if posted.Link != "https://github.com/o/r/issues/1#issuecomment-77" || posted.Duration != 40*time.Millisecond {
		t.Errorf("posted hop: got link %q duration %s", posted.Link, posted.Duration)
	}
}

// TestBuildDeadLetter: a message a worker gives up on is in its story.
func TestBuildDeadLetter(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	in := loop(t, b, "d-dl", "github:o/r#3")
	ctx := t.Context()
	testenv.Go(t, "consumer", func(ctx context.Context) error {
		return b.Consume(ctx, bus.ConsumerConfig{Name: "picky", Subject: "agent.suggestion"},
			bus.HandlerFunc(func(context.Context, *bus.Message) error { return bus.Permanent(errors.New("no target")) }))
	})
	testenv.WaitFor(t, 10*time.Second, "the dead letter in the story", func() bool {
		s, err := story.Build(ctx, b, "d-dl")
		return err == nil && slices.Contains(kinds(s), story.KindDeadLetter)
	})
	s, err := story.Build(ctx, b, envelope.TaskOf(in.ID))
	if err != nil {
		t.Fatal(err)
	}
	last := s.Hops[len(s.Hops)-1]
	if last.Kind != story.KindDeadLetter || !strings.HasPrefix(last.Summary, "picky gave up on agent.suggestion: ") {
		t.Errorf("got last hop %s %q", last.Kind, last.Summary)
	}
}

func TestBuildNotFound(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	loop(t, b, "d-1", "github:o/r#1")
	_, err := story.BuildWith(t.Context(), b, "no-such-delivery", story.Options{Since: time.Hour})
	if !errors.Is(err, story.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	// Since bounds the inbound scan: an hour-old story is out of a minute's window.
	_, err = story.BuildWith(t.Context(), b, "d-1", story.Options{Since: time.Minute,
		Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if !errors.Is(err, story.ErrNotFound) {
		t.Fatalf("outside the window: got %v, want ErrNotFound", err)
	}
}

// BenchmarkBuild is a lookup (by delivery id, and by task id, which also
// derives each webhook's task id) behind n unrelated webhooks: the cost of
// the header scan.
//
//	go test ./internal/story -run '^$' -bench Build -benchtime 10x
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		bb := bustest.Embedded(b)
		for i := range n {
			e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "noise")
			e.Meta.Thread = fmt.Sprintf("github:o/r#%d", i+10)
			if _, err := bb.PublishAsync(b.Context(), "in.github.issues", e); err != nil {
				b.Fatal(err)
			}
		}
		<-bb.PublishAsyncComplete()
		in := loop(b, bb, "d-1", "github:o/r#1")
		for _, q := range []struct{ name, id string }{{"delivery", "d-1"}, {"task", envelope.TaskOf(in.ID)}} {
			b.Run(fmt.Sprintf("noise=%d/%s", n, q.name), func(b *testing.B) {
				var scanned int
				for range b.N {
					s, err := story.Build(b.Context(), bb, q.id)
					if err != nil {
						b.Fatal(err)
					}
					scanned = s.Scanned
				}
				b.ReportMetric(float64(scanned), "scanned")
				b.ReportMetric(float64(scanned)/(b.Elapsed().Seconds()/float64(b.N)), "msgs/s")
			})
		}
	}
}
