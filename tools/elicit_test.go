package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// askServer is a go-sdk server over streamable HTTP whose tools ask the
// client back: "ask" and "ask-required" elicit a form, "summarize" samples.
func askServer(t *testing.T) mcpconfig.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "ask", Version: "1.0.0"}, nil)
	defaults := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name":     map[string]any{"type": "string", "default": "John Doe"},
			"age":      map[string]any{"type": "integer", "default": 30},
			"score":    map[string]any{"type": "number", "default": 95.5},
			"status":   map[string]any{"type": "string", "enum": []any{"active", "inactive"}, "default": "active"},
			"verified": map[string]any{"type": "boolean", "default": true},
			"note":     map[string]any{"type": "string"},
		},
		"required": []any{"name", "age"},
	}
	required := map[string]any{
		"type":       "object",
		"properties": map[string]any{"reason": map[string]any{"type": "string"}},
		"required":   []any{"reason"},
	}
	elicit := func(schema map[string]any) mcp.ToolHandlerFor[struct{}, any] {
		return func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Who are you?", RequestedSchema: schema})
			if err != nil {
				return nil, nil, err
			}
			b, _ := json.Marshal(res.Content)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action + " " + string(b)}}}, nil, nil
		}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, elicit(defaults))
	mcp.AddTool(s, &mcp.Tool{Name: "ask-required"}, elicit(required))
	// ask-many asks 13 questions in a row and reports each action, and the
	// relay's note on the last.
	mcp.AddTool(s, &mcp.Tool{Name: "ask-many"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		var actions []string
		var note any
		for range 13 {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Again?", RequestedSchema: required})
			if err != nil {
				return nil, nil, err
			}
			actions = append(actions, res.Action)
			note = res.Meta[MetaNote]
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(actions, " ") + " | " + fmt.Sprint(note)}}}, nil, nil
	})
	type sumIn struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "summarize"}, func(ctx context.Context, req *mcp.CallToolRequest, in sumIn) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
			SystemPrompt: "You summarise.",
			MaxTokens:    500,
			Messages:     []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Text}}},
		})
		if err != nil {
			return nil, nil, err
		}
		tc, _ := res.Content.(*mcp.TextContent)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Model + ": " + tc.Text}}}, nil, nil
	})
	// summarize-twice sends two sampling requests at once and reports each
	// answer, or why it was refused.
	mcp.AddTool(s, &mcp.Tool{Name: "summarize-twice"}, func(ctx context.Context, req *mcp.CallToolRequest, in sumIn) (*mcp.CallToolResult, any, error) {
		var answers [2]string
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() {
				res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
					MaxTokens: 500, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Text}}},
				})
				if err != nil {
					answers[i] = "refused: " + err.Error()
					return
				}
				tc, _ := res.Content.(*mcp.TextContent)
				answers[i] = tc.Text
			})
		}
		wg.Wait()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: answers[0] + " | " + answers[1]}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	return mcpconfig.Server{Name: "ask", Type: mcpconfig.HTTP, URL: srv.URL, ProtocolVersion: mcpconfig.DefaultProtocolVersion}
}

func TestElicitationWithoutHumanUsesDefaults(t *testing.T) {
	t.Parallel()
	cfg := fastConfig(t, askServer(t))
	r := startRunner(t, cfg)
	res := r.Call(t.Context(), Request{Tool: "ask.ask", Operator: true})
	if res.Err != nil {
		t.Fatalf("ask: %v", res.Err)
	}
	want := `accept {"age":30,"name":"John Doe","score":95.5,"status":"active","verified":true}`
	if res.Text != want {
		t.Errorf("got %q, want %q", res.Text, want)
	}
	res = r.Call(t.Context(), Request{Tool: "ask.ask-required", Operator: true})
	if res.Err != nil || res.Text != "decline null" {
		t.Errorf("required field without default: got %q, %v; want decline", res.Text, res.Err)
	}
	st := r.Servers()[0]
	if st.State != StateReady {
		t.Errorf("state %s, want ready", st.State)
	}
}

// A tool call that asks question after question gets at most the cap asked
// of a human; the rest are cancelled unasked, with a note.
func TestElicitationQuestionsPerCallAreCapped(t *testing.T) {
	t.Parallel()
	var asked atomic.Int64
	cfg := fastConfig(t, askServer(t))
	cfg.Elicitor = ElicitorFunc(func(context.Context, *Question) (*Answer, error) {
		asked.Add(1)
		return &Answer{Action: ElicitAccept, Content: map[string]any{"reason": "ok"}, By: "U1"}, nil
	})
	r := startRunner(t, cfg)
	for i := range 2 { // the cap is per call: a second call asks again
		asked.Store(0)
		res := r.Call(t.Context(), Request{Tool: "ask.ask-many", Operator: true, CallID: fmt.Sprint("call-", i), Thread: "slack:T1/C1/1.2", ActsFor: "U9"})
		if res.Err != nil {
			t.Fatalf("ask-many: %v", res.Err)
		}
		actions, note, _ := strings.Cut(res.Text, " | ")
		want := strings.TrimSpace(strings.Repeat("accept ", DefaultMaxQuestions) + strings.Repeat("cancel ", 13-DefaultMaxQuestions))
		if actions != want || !strings.Contains(note, "already asked 3 questions") {
			t.Errorf("call %d: got %q, note %q; want %q and a note", i, actions, note, want)
		}
		if got := asked.Load(); got != DefaultMaxQuestions {
			t.Errorf("call %d: a human was asked %d questions, want %d", i, got, DefaultMaxQuestions)
		}
	}
}

func TestElicitationAsksTheCallsHuman(t *testing.T) {
	t.Parallel()
	var questions recorder[*Question]
	cfg := fastConfig(t, askServer(t))
	cfg.Elicitor = ElicitorFunc(func(ctx context.Context, q *Question) (*Answer, error) {
		questions.add(q)
		switch q.Thread {
		case "slack:T1/C1/1.2":
			return &Answer{Action: ElicitAccept, Content: map[string]any{"reason": "because"}, By: "U1"}, nil
		case "slack:T1/C1/cancel":
			return &Answer{Action: ElicitCancel, Content: map[string]any{"ignored": true}}, nil
		case "slack:T1/C1/slow":
			<-ctx.Done() // nobody answers
			return nil, ctx.Err()
		}
		return nil, ErrNoHuman
	})
	cfg.ElicitTimeout = 300 * time.Millisecond
	r := startRunner(t, cfg)

	tests := []struct {
		name, tool, thread, want string
	}{
		{"human accepts", "ask.ask-required", "slack:T1/C1/1.2", `accept {"reason":"because"}`},
		{"human cancels", "ask.ask-required", "slack:T1/C1/cancel", "cancel null"},
		{"timeout declines", "ask.ask-required", "slack:T1/C1/slow", "decline null"},
		{"no human: defaults", "ask.ask", "github:o/r#1", `accept {"age":30,"name":"John Doe","score":95.5,"status":"active","verified":true}`},
		{"no human: decline", "ask.ask-required", "github:o/r#1", "decline null"},
	}
	// Sequential: calls for different threads in flight at once on one
	// session cannot tell whose a question is, and nobody would be asked.
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res := r.Call(t.Context(), Request{Tool: tc.tool, Operator: true, CallID: "call-" + tc.name, TaskID: "task-1", Thread: tc.thread, ActsFor: "U9"})
			if res.Err != nil || res.Text != tc.want {
				t.Fatalf("got %q, %v; want %q", res.Text, res.Err, tc.want)
			}
			if tc.name == "timeout declines" && time.Since(start) < 300*time.Millisecond {
				t.Errorf("declined after %s, before the 300ms timeout", time.Since(start))
			}
		})
	}
	t.Cleanup(func() {
		asked := questions.all()
		if len(asked) != len(tests) {
			t.Errorf("asked %d questions, want %d", len(asked), len(tests))
		}
		for _, q := range asked {
			if q.Server != "ask" || q.Tool == "" || q.TaskID != "task-1" || q.ActsFor != "U9" || !strings.HasPrefix(q.CallID, "call-") ||
				q.Message != "Who are you?" || q.Schema["type"] != "object" || q.Deadline.IsZero() || q.ID == "" {
				t.Errorf("question %+v lacks the call's details", q)
			}
		}
	})
}

func TestSamplingUnderTheTaskBudget(t *testing.T) {
	t.Parallel()
	var requests recorder[*SampleRequest]
	cfg := fastConfig(t, askServer(t))
	cfg.Sampler = SamplerFunc(func(_ context.Context, req *SampleRequest) (*SampleResult, error) {
		requests.add(req)
		if strings.Contains(req.Messages[0].Text, "fail") {
			return nil, errors.New("llm chat completion: HTTP 503")
		}
		return &SampleResult{Text: "short", Model: "fake-model", PromptTokens: 40, CompletionTokens: 10}, nil
	})
	r := startRunner(t, cfg)

	res := r.Call(t.Context(), Request{Tool: "ask.summarize", Operator: true, Args: map[string]any{"text": "a long text"}, TokenBudget: 100})
	if res.Err != nil || res.Text != "fake-model: short" {
		t.Fatalf("got %q, %v", res.Text, res.Err)
	}
	if res.SamplingTokens != 50 || res.Map()["sampling_tokens"] != 50 {
		t.Errorf("sampling tokens %d (map %v), want 50", res.SamplingTokens, res.Map()["sampling_tokens"])
	}
	first := requests.all()[0]
	if first.MaxTokens <= 0 || first.MaxTokens > 100 || first.System != "You summarise." || first.Messages[0].Role != "user" {
		t.Errorf("sampler got %+v, want max tokens within the budget of 100", first)
	}

	// Without a task budget the server's maxTokens stands.
	res = r.Call(t.Context(), Request{Tool: "ask.summarize", Operator: true, Args: map[string]any{"text": "x"}})
	got := requests.all()
	last := got[len(got)-1]
	if res.Err != nil || last.MaxTokens != 500 {
		t.Errorf("no budget: got %v, max tokens %d; want 500", res.Err, last.MaxTokens)
	}

	// A prompt the budget cannot pay for is refused before the LLM is asked.
	n := len(requests.all())
	res = r.Call(t.Context(), Request{Tool: "ask.summarize", Operator: true, Args: map[string]any{"text": strings.Repeat("word ", 100)}, TokenBudget: 20})
	if res.Err == nil || !strings.Contains(res.Err.Error(), "token budget") {
		t.Errorf("over budget: got %q, %v; want a token budget refusal", res.Text, res.Err)
	}
	res = r.Call(t.Context(), Request{Tool: "ask.summarize", Operator: true, Args: map[string]any{"text": "please fail"}})
	if res.Err == nil || !strings.Contains(res.Err.Error(), "HTTP 503") {
		t.Errorf("LLM down: got %q, %v; want the LLM's error", res.Text, res.Err)
	}
	if got := len(requests.all()); got != n+1 {
		t.Errorf("sampler asked %d times after the refusal, want 1", got-n)
	}
}

// Two sampling requests of one call in flight at once share its budget:
// each is given what the other has not reserved, so together they never
// spend more than the call's share of the task.
func TestSamplingRequestsShareTheBudget(t *testing.T) {
	t.Parallel()
	var requests recorder[*SampleRequest]
	both := make(chan struct{})
	var once sync.Once
	cfg := fastConfig(t, askServer(t))
	cfg.Sampler = SamplerFunc(func(ctx context.Context, req *SampleRequest) (*SampleResult, error) {
		if requests.add(req); len(requests.all()) == 2 {
			once.Do(func() { close(both) })
		}
		// Hold the answer until the other request arrives (or clearly will
		// not): both are then in flight at once.
		select {
		case <-both:
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// Spend everything allowed, as a verbose model would.
		return &SampleResult{Text: "spent", Model: "fake-model", CompletionTokens: req.MaxTokens}, nil
	})
	r := startRunner(t, cfg)

	const budget = 300
	res := r.Call(t.Context(), Request{Tool: "ask.summarize-twice", Operator: true, Args: map[string]any{"text": "a text"}, TokenBudget: budget})
	if res.Err != nil {
		t.Fatalf("call: %v", res.Err)
	}
	asked := 0
	for _, req := range requests.all() {
		asked += req.MaxTokens
	}
	if res.SamplingTokens > budget || asked > budget {
		t.Errorf("the two requests were allowed %d answer tokens and spent %d, over the call's budget of %d (answers %q)", asked, res.SamplingTokens, budget, res.Text)
	}
	if res.SamplingTokens == 0 || !strings.Contains(res.Text, "spent") {
		t.Errorf("got %q, %d tokens; want at least one request answered", res.Text, res.SamplingTokens)
	}
}

func TestSamplingRefusedWithoutLLM(t *testing.T) {
	t.Parallel()
	r := startRunner(t, fastConfig(t, askServer(t)))
	res := r.Call(t.Context(), Request{Tool: "ask.summarize", Operator: true, Args: map[string]any{"text": "x"}})
	if res.Err == nil || !strings.Contains(res.Err.Error(), "no LLM endpoint is configured") {
		t.Fatalf("got %q, %v; want a refusal naming the missing LLM", res.Text, res.Err)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		schema string
		want   string
		ok     bool
	}{
		{"every required has a default", `{"properties":{"a":{"default":1},"b":{"type":"string"}},"required":["a"]}`, `{"a":1}`, true},
		{"required without default", `{"properties":{"a":{"default":1},"b":{"type":"string"}},"required":["a","b"]}`, `null`, false},
		{"nothing required, nothing defaulted", `{"properties":{"b":{"type":"string"}}}`, `{}`, true},
		{"no schema", `{}`, `{}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s map[string]any
			_ = json.Unmarshal([]byte(tc.schema), &s)
			got, ok := Defaults(s)
			b, _ := json.Marshal(got)
			if string(b) != tc.want || ok != tc.ok {
				t.Errorf("got %s, %v; want %s, %v", b, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestElicitationDuringCallsOfDifferentThreads: two calls for different
// people in flight on one session; a question cannot be placed, so nobody is
// asked and the defaults apply.
func TestElicitationDuringCallsOfDifferentThreads(t *testing.T) {
	t.Parallel()
	s := mcp.NewServer(&mcp.Implementation{Name: "two", Version: "1.0.0"}, nil)
	both := make(chan struct{}, 2)
	release := make(chan struct{})
	mcp.AddTool(s, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		both <- struct{}{}
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "held"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		both <- struct{}{}
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "sure?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean", "default": false}}}})
		close(release)
		if err != nil {
			return nil, nil, err
		}
		b, _ := json.Marshal(res.Content)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action + " " + string(b)}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	var asked atomic.Int32
	cfg := fastConfig(t, mcpconfig.Server{Name: "two", Type: mcpconfig.HTTP, URL: srv.URL, ProtocolVersion: mcpconfig.DefaultProtocolVersion})
	cfg.Elicitor = ElicitorFunc(func(context.Context, *Question) (*Answer, error) {
		asked.Add(1)
		return &Answer{Action: ElicitAccept, Content: map[string]any{"ok": true}}, nil
	})
	r := startRunner(t, cfg)
	held := make(chan *Result, 1)
	go func() {
		held <- r.Call(t.Context(), Request{Tool: "two.hold", Operator: true, Thread: "slack:T1/C1/1.1", ActsFor: "U1"})
	}()
	<-both // hold is in flight before ask starts
	res := r.Call(t.Context(), Request{Tool: "two.ask", Operator: true, Thread: "slack:T1/C1/2.2", ActsFor: "U2"})
	if res.Err != nil || res.Text != `accept {"ok":false}` {
		t.Errorf("got %q, %v; want the defaults", res.Text, res.Err)
	}
	if h := <-held; h.Err != nil {
		t.Errorf("hold: %v", h.Err)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("asked %d times, want 0", n)
	}
}
