package agent

import (
	"context"
	"strconv"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/internal/story"
)

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
