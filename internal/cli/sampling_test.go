package cli

import (
	"strings"
	"testing"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/tools"
)

func TestSamplerOnTheLLMEndpoint(t *testing.T) {
	t.Parallel()
	llm := fakes.NewLLM(t, func(r *fakes.ChatRequest) fakes.Reply { return fakes.Reply{Text: "a summary"} })
	env := config.FromMap(map[string]string{"LLM_BASE_URL": llm.URL(), "LLM_MODEL": "sampler-model", "LLM_API_KEY": "sk-test"})
	s := readSampler(env)
	if s == nil {
		t.Fatal("no sampler with LLM_BASE_URL and LLM_MODEL set")
	}
	res, err := s.Sample(t.Context(), &tools.SampleRequest{System: "Be brief.", MaxTokens: 64,
		Messages: []tools.SampleMessage{{Role: "user", Text: "Summarise this."}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "a summary" || res.Model != "sampler-model" || res.PromptTokens != 100 || res.CompletionTokens != 20 {
		t.Errorf("got %+v", res)
	}
	reqs := llm.Requests()
	if len(reqs) != 1 || reqs[0].MaxTokens != 64 || len(reqs[0].Tools) != 0 || !strings.Contains(reqs[0].Text(), "Be brief.\nSummarise this.") {
		t.Errorf("endpoint got %+v, want max_tokens 64, no tools, the system and user text", reqs)
	}
	if readSampler(config.FromMap(map[string]string{})) != nil {
		t.Error("a sampler without LLM_BASE_URL")
	}
}
