package cli

import (
	"context"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/services/agent"
	"github.com/relaystation/relay/tools"
)

// readSampler is the LLM that answers MCP servers' sampling requests: the
// agent's OpenAI-compatible client on LLM_BASE_URL, LLM_MODEL and
// LLM_API_KEY; nil (servers' requests refused) without them.
func readSampler(env *config.Env) tools.Sampler {
	base, model := env.URL("LLM_BASE_URL", "http", "https"), env.String("LLM_MODEL", "")
	if base == "" || model == "" {
		return nil // the agent's settings say what is missing
	}
	m, err := agent.NewOpenAI(agent.OpenAIConfig{BaseURL: base, Model: model, APIKey: env.Secret("LLM_API_KEY")})
	if err != nil {
		env.Failf("LLM_BASE_URL", "%v", err)
		return nil
	}
	return llmSampler{m}
}

// llmSampler adapts the agent's client to tools.Sampler (the tool runner
// does not import the agent).
type llmSampler struct{ m *agent.OpenAI }

func (s llmSampler) Sample(ctx context.Context, req *tools.SampleRequest) (*tools.SampleResult, error) {
	msgs := make([]agent.Message, 0, len(req.Messages)+1)
	if req.System != "" {
		msgs = append(msgs, agent.Message{Role: "system", Content: req.System})
	}
	for _, m := range req.Messages {
		msgs = append(msgs, agent.Message{Role: m.Role, Content: m.Text})
	}
	r, err := s.m.Sample(ctx, msgs, agent.SampleParams{MaxTokens: req.MaxTokens, Temperature: req.Temperature, Stop: req.Stop})
	if err != nil {
		return nil, err
	}
	return &tools.SampleResult{Text: r.Content, Model: r.Model, Truncated: r.Truncated,
		PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens}, nil
}
