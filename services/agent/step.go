package agent

import (
	"context"
	"strconv"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/internal/story"
	"github.com/relaystation/relay/internal/telemetry"
)

// askModel asks the model, in a model-call span when tracing.
func (s *Service) askModel(ctx context.Context, msgs []Message, specs []ToolSpec) (*Completion, error) {
	if !telemetry.Enabled() {
		return s.cfg.Model.Complete(ctx, msgs, specs)
	}
	ctx, span := telemetry.ModelCall(ctx, s.cfg.ModelName)
	comp, err := s.cfg.Model.Complete(ctx, msgs, specs)
	if comp != nil {
		telemetry.EndModelCall(span, comp.Model, comp.PromptTokens, comp.CompletionTokens, err)
	} else {
		telemetry.EndModelCall(span, "", 0, 0, err)
	}
	return comp, err
}

// publishStep records one model call on task.step (story.SubjectModelCall):
// the model, the step, its token counts, how long it took and what it
// asked for, so `relay trace` and the console show every step. The record
// is best effort: a failure to publish it is logged, the task goes on. Its
// message id is the task and step, so a redelivered step records once.
// n is the task before the call (n.Step is the step before this one).
func (s *Service) publishStep(ctx context.Context, n *Task, comp *Completion, callErr error, took time.Duration) {
	if ctx.Err() != nil {
		return
	}
	mc := story.ModelCall{Model: s.cfg.ModelName, Step: n.Step + 1, DurationMS: took.Milliseconds()}
	switch {
	case callErr != nil:
		mc.Error = callErr.Error()
	case comp != nil:
		mc.PromptTokens, mc.CompletionTokens = comp.PromptTokens, comp.CompletionTokens
		if comp.Model != "" && mc.Model == "" {
			mc.Model = comp.Model
		}
		for _, c := range comp.ToolCalls {
			mc.ToolCalls = append(mc.ToolCalls, c.Name)
		}
		if len(mc.ToolCalls) == 0 {
			mc.Finish = "answer"
		}
	}
	of := n.Origin.Meta
	of.TaskID = n.ID
	e := story.NewRecord(&of, "model call "+strconv.Itoa(mc.Step), story.MetaModelCall, mc)
	msgID := "step:" + n.ID + ":" + strconv.Itoa(mc.Step)
	if _, err := s.bus.Publish(ctx, story.SubjectModelCall, e, bus.WithMsgID(msgID)); err != nil {
		s.log.Warn("model call record not published", "task_id", n.ID, "step", mc.Step, "err", err)
	}
}
