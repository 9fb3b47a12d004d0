package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/shared"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/secret"
)

func TestParseTrigger(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Trigger
		err  bool
	}{
		{in: "slack.app_mention", want: Trigger{Trigger: envelope.Trigger{Channel: "slack", Event: "app_mention"}}},
		{in: "github.issues.opened", want: Trigger{Trigger: envelope.Trigger{Channel: "github", Event: "issues", Action: "opened"}}},
		{in: " github.issue_comment.created:mention ", want: Trigger{Trigger: envelope.Trigger{Channel: "github", Event: "issue_comment", Action: "created"}, Mention: true}},
		{in: "sentry.issue.*", want: Trigger{Trigger: envelope.Trigger{Channel: "sentry", Event: "issue", Action: "*"}}},
		{in: "github", err: true},
		{in: "jira.issue.created", err: true},
		{in: "github..opened", err: true},
		{in: "github.issues.opened:loud", err: true},
		{in: "github.a.b.c", err: true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTrigger(tc.in)
			if tc.err {
				if !errors.Is(err, ErrBadTrigger) {
					t.Fatalf("got %v, want ErrBadTrigger", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			if again, _ := ParseTrigger(got.String()); again != got {
				t.Errorf("String %q does not parse back: got %+v", got.String(), again)
			}
		})
	}
	if _, err := ParseTriggers(nil); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	triggers, _ := ParseTriggers(nil)
	m := &Matcher{Triggers: triggers, Mention: "@relay-bot", BotUsers: []string{"relay-bot"}}
	noMention := &Matcher{Triggers: triggers}

	sentry := envelope.New(envelope.ChannelSentry, envelope.RoleUser, "Sentry issue created")
	sentry.Meta.Source = &envelope.Source{Event: "issue", Action: "created"}
	resolved := envelope.New(envelope.ChannelSentry, envelope.RoleUser, "Sentry issue resolved")
	resolved.Meta.Source = &envelope.Source{Event: "issue", Action: "resolved"}
	wp := envelope.New(envelope.ChannelOpenProject, envelope.RoleUser, "created work package")
	wp.Meta.Source = &envelope.Source{Event: "work_package", Action: "created"}
	cmd := envelope.New(envelope.ChannelSlack, envelope.RoleUser, "ran /relay summarize")
	cmd.Meta.Source = &envelope.Source{Event: "command", Action: "/relay"}
	assistant := githubIssueOpened()
	assistant.Role = envelope.RoleAssistant
	noSource := githubIssueOpened()
	noSource.Meta.Source = nil
	appBot := githubComment("@relay-bot hi", "relay-bot[bot]")
	slackSelf := slackMention(false, false)
	slackSelf.Meta.Extra["slack"].(map[string]any)["user"] = "RELAY-BOT"

	cases := []struct {
		name   string
		m      *Matcher
		e      *envelope.Envelope
		want   bool
		reason string
	}{
		{"github issue opened", m, githubIssueOpened(), true, ""},
		{"comment mentioning the bot", m, githubComment("hey @relay-bot, look", "octocat"), true, ""},
		{"comment mentioning in other case", m, githubComment("hey @RELAY-BOT", "octocat"), true, ""},
		{"comment without mention", m, githubComment("thanks", "octocat"), false, SkipNoMention},
		{"mention trigger without configured mention", noMention, githubComment("hey @relay-bot", "octocat"), false, SkipNoMention},
		{"comment by the bot", m, githubComment("@relay-bot done", "relay-bot"), false, SkipSelf},
		{"comment by the bot app", m, appBot, false, SkipSelf},
		{"comment with the outbound marker", m, githubComment("@relay-bot <!-- relay:x -->", "octocat"), false, SkipSelf},
		{"slack mention", m, slackMention(false, false), true, ""},
		{"slack bot message", m, slackMention(true, false), false, SkipBot},
		{"slack edit", m, slackMention(false, true), false, SkipEdit},
		{"slack by the bot user", m, slackSelf, false, SkipSelf},
		{"slack command", m, cmd, true, ""},
		{"sentry issue created", m, sentry, true, ""},
		{"sentry issue resolved", m, resolved, false, SkipNoTrigger},
		{"openproject work package created", m, wp, true, ""},
		{"assistant envelope", m, assistant, false, SkipNotUser},
		{"no source", m, noSource, false, SkipNoSource},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, reason := tc.m.Match(tc.e)
			if got != tc.want || reason != tc.reason {
				t.Errorf("got %v %q, want %v %q", got, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestTargetOf(t *testing.T) {
	t.Parallel()
	cmd := envelope.New(envelope.ChannelSlack, envelope.RoleUser, "ran /relay")
	cmd.Meta.Thread = "slack:T1/C1/cmd-123.456"
	cmd.Meta.Set("slack", map[string]any{"team": "T1", "channel": "C1"})
	sentry := envelope.New(envelope.ChannelSentry, envelope.RoleUser, "x")
	sentry.Meta.Thread = "sentry:test-org/1170820242"
	sentryMeta := envelope.New(envelope.ChannelSentry, envelope.RoleUser, "x")
	sentryMeta.Meta.Thread = "sentry:a8e5d37a/1170820242"
	sentryMeta.Meta.Set("sentry", map[string]any{"org": "test-org", "issue_id": "1170820242"})
	incident := envelope.New(envelope.ChannelSentry, envelope.RoleUser, "x")
	incident.Meta.Thread = "sentry:test-org/incident-7"
	wp := envelope.New(envelope.ChannelOpenProject, envelope.RoleUser, "x")
	wp.Meta.Thread = "openproject:openproject.example.com/work_packages/1528"
	repoOnly := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "x")
	repoOnly.Meta.Thread = "github:Codertocat/Hello-World"
	internal := envelope.New(envelope.ChannelInternal, envelope.RoleUser, "x")

	cases := []struct {
		name string
		e    *envelope.Envelope
		want *envelope.Target
	}{
		{"github issue", githubIssueOpened(), &envelope.Target{Channel: "github", Owner: "Codertocat", Repo: "Hello-World", Number: 1}},
		{"slack thread", slackMention(false, false), &envelope.Target{Channel: "slack", Team: "T123ABC456", SlackCh: "C0LAN2Q65", ThreadTS: "1700000000.000100"}},
		{"slack command", cmd, &envelope.Target{Channel: "slack", Team: "T1", SlackCh: "C1"}},
		{"sentry from thread", sentry, &envelope.Target{Channel: "sentry", Org: "test-org", IssueID: "1170820242"}},
		{"sentry from meta", sentryMeta, &envelope.Target{Channel: "sentry", Org: "test-org", IssueID: "1170820242"}},
		{"sentry incident", incident, nil},
		{"openproject", wp, &envelope.Target{Channel: "openproject", Host: "openproject.example.com", WorkPackageID: 1528}},
		{"github repository", repoOnly, nil},
		{"internal", internal, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := envelope.TargetOf(tc.e)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("got %+v, want an error", got)
				}
				return
			}
			if err != nil || *got != *tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestContentToolCalls(t *testing.T) {
	t.Parallel()
	known := func(n string) bool { return n == "everything__echo" || n == "retrieve_docs" }
	cases := []struct {
		name, in string
		want     []LLMCall
	}{
		{"plain answer", "The fix is in PR #7.", nil},
		{"object", `{"name": "everything__echo", "arguments": {"message": "hi"}}`, []LLMCall{{Name: "everything__echo", Arguments: `{"message": "hi"}`}}},
		{"llama parameters", `{"name": "retrieve_docs", "parameters": {"query": "x"}}`, []LLMCall{{Name: "retrieve_docs", Arguments: `{"query": "x"}`}}},
		{"string arguments", `{"name": "retrieve_docs", "arguments": "{\"query\": \"x\"}"}`, []LLMCall{{Name: "retrieve_docs", Arguments: `{"query": "x"}`}}},
		{"function wrapper", `{"function": {"name": "retrieve_docs", "arguments": {}}}`, []LLMCall{{Name: "retrieve_docs", Arguments: `{}`}}},
		{"tool_calls list", `{"tool_calls": [{"function": {"name": "retrieve_docs", "arguments": {"query": "a"}}}, {"name": "everything__echo"}]}`,
			[]LLMCall{{Name: "retrieve_docs", Arguments: `{"query": "a"}`}, {Name: "everything__echo", Arguments: "{}"}}},
		{"fenced", "```json\n{\"name\": \"retrieve_docs\", \"arguments\": {\"query\": \"q\"}}\n```", []LLMCall{{Name: "retrieve_docs", Arguments: `{"query": "q"}`}}},
		{"hermes tags", "<tool_call>{\"name\": \"retrieve_docs\", \"arguments\": {\"query\": \"a\"}}</tool_call>\n<tool_call>{\"name\": \"everything__echo\", \"arguments\": {\"message\": \"b\"}}</tool_call>",
			[]LLMCall{{Name: "retrieve_docs", Arguments: `{"query": "a"}`}, {Name: "everything__echo", Arguments: `{"message": "b"}`}}},
		{"unknown tool", `{"name": "rm_rf", "arguments": {}}`, nil},
		{"JSON answer that is no call", `{"status": "ok"}`, nil},
		{"one unknown among known", `[{"name": "retrieve_docs"}, {"name": "nope"}]`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ContentToolCalls(tc.in, known)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRefs(t *testing.T) {
	t.Parallel()
	answer := "See [[ref:doc-1]], [[ref:mem-abc]] and again [[ref:doc-1]]; not [[ref:]] or [ref:x] or [[ref:bad id]]. Also [[ref:ghost]]."
	if got, want := CitedRefs(answer), []string{"doc-1", "mem-abc", "ghost"}; !slices.Equal(got, want) {
		t.Errorf("got cited %v, want %v", got, want)
	}
	if got, want := UnknownRefs(answer, []string{"doc-1", "mem-abc", "unused"}), []string{"ghost"}; !slices.Equal(got, want) {
		t.Errorf("got unknown %v, want %v", got, want)
	}
}

func TestFuncName(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"everything.echo":               "everything__echo",
		"fs.read file":                  "fs__read_file",
		"":                              "tool",
		"s." + string(make([]byte, 80)): "s__" + string(repeat('_', 61)),
	}
	for in, want := range cases {
		if got := FuncName(in); got != want {
			t.Errorf("FuncName(%q) = %q, want %q", in, got, want)
		}
	}
}

func repeat(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	resp := func(k, v string) *http.Response {
		h := http.Header{}
		h.Set(k, v)
		return &http.Response{Header: h}
	}
	cases := []struct {
		name string
		r    *http.Response
		want time.Duration
		ok   bool
	}{
		{"ms", resp("retry-after-ms", "250"), 250 * time.Millisecond, true},
		{"seconds", resp("Retry-After", "2"), 2 * time.Second, true},
		{"capped", resp("Retry-After", "3600"), time.Minute, true},
		{"date in the past", resp("Retry-After", "Mon, 02 Jan 2006 15:04:05 GMT"), 0, true},
		{"garbage", resp("Retry-After", "soon"), 0, false},
		{"none", &http.Response{Header: http.Header{}}, 0, false},
		{"no response", nil, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := retryAfter(tc.r, time.Minute)
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %s %v, want %s %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestTaskIDIsStable(t *testing.T) {
	t.Parallel()
	a, b := TaskID("00000000-0000-4000-8000-000000000001"), TaskID("00000000-0000-4000-8000-000000000001")
	if a != b || a == TaskID("00000000-0000-4000-8000-000000000002") {
		t.Errorf("got %s and %s; want equal ids for one envelope and different ids for another", a, b)
	}
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleAssistant, "x")
	e.ID = envelope.DerivedID("relay-call:t:s1-0")
	if err := envelope.Validate(e); err != nil {
		t.Errorf("derived id %s is not schema-valid: %v", e.ID, err)
	}
}

func TestOpenAISendsTheKeyAndNeverShowsIt(t *testing.T) {
	t.Parallel()
	const key = "sk-test-very-secret"
	var gotAuth string
	srv := newLLM(t, status(http.StatusUnauthorized))
	m, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, Model: "m", APIKey: secret.New(key), MaxTries: 3,
		Backoff: time.Millisecond, HTTPClient: &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			gotAuth = r.Header.Get("Authorization")
			return http.DefaultTransport.RoundTrip(r)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Complete(t.Context(), []Message{{Role: "user", Content: "hi"}}, nil)
	var le *LLMError
	if !errors.As(err, &le) || le.Status != http.StatusUnauthorized || le.Attempts != 1 || !errors.Is(err, ErrLLMUnavailable) {
		t.Fatalf("got %v, want a 401 LLMError after one attempt (not retried)", err)
	}
	if gotAuth != "Bearer "+key {
		t.Errorf("got Authorization %q, want the bearer key", gotAuth)
	}
	if strings.Contains(err.Error(), key) || strings.Contains(fmt.Sprintf("%+v %#v", m, m), key) {
		t.Error("the key shows in an error or in the model's printed form")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestChatBody checks that the agent's own request body is the JSON
// openai-go encodes for the same messages and tools.
func TestChatBody(t *testing.T) {
	t.Parallel()
	msgs := []Message{
		{Role: "system", Content: "be brief <&>"},
		{Role: "user", Content: ""},
		{Role: "assistant", ToolCalls: []LLMCall{{ID: "c1", Name: "s__echo", Arguments: `{"message":"hi"}`}, {ID: "c2", Name: "s__add", Arguments: "{}"}}},
		{Role: "tool", ToolCallID: "c1", Content: "hi"},
		{Role: "tool", Content: "no id"},
		{Role: "assistant", Content: "calling", ToolCalls: []LLMCall{{ID: "c3", Name: "s__echo", Arguments: "{}"}}},
		{Role: "assistant", Content: "the answer"},
		{Role: "assistant"},
		{Role: "narrator", Content: "left out"},
	}
	schema := json.RawMessage(`{"type": "object", "properties": {
		"message": {"type": "string", "description": "text"}, "n": {"type": "integer", "minimum": 1}},
		"required": ["message"]}`)
	tests := []struct {
		name  string
		msgs  []Message
		tools []ToolSpec
	}{
		{"no tools", msgs[:2], nil},
		{"tools", msgs, []ToolSpec{{Name: "s__echo", Description: "echoes", Parameters: schema}, {Name: "bare"}, {Name: "empty", Parameters: json.RawMessage(`{}`)}}},
		{"no messages", nil, []ToolSpec{{Name: "bare"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := chatBody("m", tc.msgs, tc.tools)
			if err != nil {
				t.Fatalf("chatBody: %v", err)
			}
			want, err := openAIParams("m", tc.msgs, tc.tools).MarshalJSON()
			if err != nil {
				t.Fatalf("openai-go: %v", err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("chatBody made invalid JSON: %v\n%s", err, got)
			}
			_ = json.Unmarshal(want, &w) // openai-go's own output
			if !reflect.DeepEqual(g, w) {
				t.Errorf("got body\n%s\nwant (openai-go)\n%s", got, want)
			}
		})
	}
}

// openAIParams is the request openai-go's own types make of msgs and tools.
func openAIParams(model string, msgs []Message, tools []ToolSpec) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{Model: shared.ChatModel(model), Messages: toParams(msgs)}
	for _, t := range tools {
		p := map[string]any{"type": "object", "properties": map[string]any{}}
		if len(t.Parameters) > 0 {
			p = nil
			if err := json.Unmarshal(t.Parameters, &p); err != nil {
				panic(err)
			}
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(p)}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionToolParam{Function: fd})
	}
	return params
}

// TestOpenAIConcurrentRequestsKeepTheirBodies: concurrent Completes each send
// their own conversation. openai-go appends a request's options to the
// service's shared option slice, so with room left in that slice's array
// concurrent requests could write their bodies into the same element.
func TestOpenAIConcurrentRequestsKeepTheirBodies(t *testing.T) {
	t.Parallel()
	// The echo of the last message's content is the answer.
	srv := newLLM(t, func(w http.ResponseWriter, r *fakes.ChatRequest) {
		writeJSON(w, completion(map[string]any{"role": "assistant", "content": r.Messages[len(r.Messages)-1].Content}))
	})
	for _, key := range []string{"", "sk-test"} { // with and without a key the options differ in number
		m, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL, Model: "m", APIKey: secret.New(key), MaxTries: 1})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 16 {
			wg.Go(func() {
				for i := range 4 {
					want := fmt.Sprintf("caller %d, request %d", g, i)
					c, err := m.Complete(t.Context(), []Message{{Role: "user", Content: want}}, nil)
					if err != nil {
						errs <- err
						return
					}
					if c.Content != want {
						errs <- fmt.Errorf("key %q: sent %q, the model saw %q", key, want, c.Content)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}
