package agent

import (
	"context"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/tools"
)

// wholeResult is the whole reply of a tool result too large for one bus
// message (the tool runner stored it in tools.ResultBucket and published its
// start with a note), read from the object store when the model may see
// more of it than the start carries (MaxToolOutput); else e. When the store
// cannot be read, the start is what the model gets, and a warning says so.
func (s *Service) wholeResult(ctx context.Context, e *envelope.Envelope) *envelope.Envelope {
	if _, stored := e.Meta.Get(tools.MetaResultObject); !stored {
		return e
	}
	if text, _ := e.ToolCall.Result["text"].(string); len(text) >= s.cfg.MaxToolOutput {
		return e // the start fills what the model is given
	}
	whole, err := tools.FetchResult(ctx, s.bus.JetStream(), s.bus.Prefix(), e)
	if err != nil || whole.ToolCall == nil {
		s.log.Warn("stored tool result not read; the model gets its start", "envelope_id", e.ID, "err", err)
		return e
	}
	return whole
}
