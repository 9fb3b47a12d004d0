package agent

import (
	"context"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/shared"

	"github.com/relaystation/relay/envelope"
)

// SampleParams bound a sampling completion.
type SampleParams struct {
	// MaxTokens caps the completion (max_tokens); 0 leaves it to the endpoint.
	MaxTokens   int
	Temperature *float64
	Stop        []string
}

// Sampled is the completion of a sampling request.
type Sampled struct {
	Completion
	// Model is the model that answered, as the endpoint names it.
	Model string
	// Truncated says the completion stopped at MaxTokens.
	Truncated bool
}

// Sample completes msgs (system, user and assistant text) without tools. It
// answers the sampling requests MCP servers send during tool calls, which
// the tool runner hands over through its own interface (tools.Sampler); the
// retries and errors are Complete's.
func (o *OpenAI) Sample(ctx context.Context, msgs []Message, p SampleParams) (*Sampled, error) {
	params := openai.ChatCompletionNewParams{
		Model:    shared.ChatModel(o.cfg.Model),
		Messages: toParams(msgs),
	}
	if p.MaxTokens > 0 {
		params.MaxTokens = openai.Int(int64(p.MaxTokens))
	}
	if p.Temperature != nil {
		params.Temperature = openai.Float(*p.Temperature)
	}
	if len(p.Stop) > 0 {
		params.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: p.Stop}
	}
	res, err := o.send(ctx, params)
	if err != nil {
		return nil, err
	}
	ch := res.Choices[0]
	return &Sampled{
		Completion: Completion{Content: ch.Message.Content, PromptTokens: int(res.Usage.PromptTokens), CompletionTokens: int(res.Usage.CompletionTokens)},
		Model:      res.Model,
		Truncated:  ch.FinishReason == "length",
	}, nil
}

// samplingTokens are the LLM tokens a tool's server spent through sampling
// during the call (tool_call.result.sampling_tokens, set by the tool runner).
func samplingTokens(e *envelope.Envelope) int {
	if e.ToolCall == nil {
		return 0
	}
	n, _ := e.ToolCall.Result["sampling_tokens"].(float64)
	return max(int(n), 0)
}
