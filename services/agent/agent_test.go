package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
)

// replyContent replies with a tool call written into the content, as some
// llama.cpp and Ollama templates do.
func replyContent(text string) reply {
	return func(w http.ResponseWriter, _ *fakes.ChatRequest) {
		writeJSON(w, completion(map[string]any{"role": "assistant", "content": text}))
	}
}

func TestToolLoop(t *testing.T) {
	t.Parallel()
	const answer = "The typo is fixed in PR #7 [[ref:mem-readme]]; see also [[ref:made-up]]."
	cases := []struct {
		name  string
		first reply
	}{
		{"native tool_calls", callTool("everything__echo", map[string]any{"message": "hi"})},
		{"dotted tool name", callTool("everything.echo", map[string]any{"message": "hi"})},
		{"JSON in content", replyContent(`{"name": "everything__echo", "arguments": {"message": "hi"}}`)},
		{"hermes tag in content", replyContent("<tool_call>\n{\"name\": \"everything__echo\", \"arguments\": {\"message\": \"hi\"}}\n</tool_call>")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, []reply{tc.first, say(answer)})
			trigger := githubIssueOpened()
			h.publish(t, "in.github.issues", trigger)
			s := h.next(t)
			taskID := TaskID(trigger.ID)

			checkSuggestion(t, s, trigger, answer)

			calls := h.runner.received()
			if len(calls) != 1 {
				t.Fatalf("got %d tool calls, want 1", len(calls))
			}
			c := calls[0]
			if c.ToolCall.Name != "everything.echo" || c.ToolCall.Args["message"] != "hi" || c.Meta.TaskID != taskID || c.Meta.Thread != trigger.Meta.Thread {
				t.Errorf("got tool call %+v task %q thread %q", c.ToolCall, c.Meta.TaskID, c.Meta.Thread)
			}
			var agent map[string]any
			if ok, err := c.Meta.Decode("agent", &agent); !ok || err != nil || agent["id"] != "agent-test" || agent["role"] != "agent" {
				t.Errorf("got meta.agent %v, want id agent-test role agent", agent)
			}

			reqs := h.llm.requests()
			if len(reqs) != 2 {
				t.Fatalf("got %d LLM requests, want 2", len(reqs))
			}
			if got := reqs[0].ToolNames(); !slices.Equal(got, []string{"retrieve_docs", "everything__echo"}) {
				t.Errorf("got offered tools %v, want retrieve_docs and everything__echo", got)
			}
			if reqs[0].ToolChoice != nil {
				t.Errorf("got tool_choice %v, want none sent", reqs[0].ToolChoice)
			}
			sys, _ := reqs[0].Messages[0].Content.(string)
			if !strings.Contains(sys, "[[ref:mem-readme]]") || !strings.Contains(sys, "README typos") || !strings.Contains(sys, "GitHub Codertocat/Hello-World#1") {
				t.Errorf("system prompt lacks refs, session or target:\n%s", sys)
			}
			if got := reqs[1].LastTool(); got != "Echo: hi" {
				t.Errorf("got tool output %q given to the model, want %q", got, "Echo: hi")
			}
			h.none(t)
		})
	}
}

// checkSuggestion checks the suggestion the tool loop ends with: the answer
// to trigger, on its task, thread, target and source, with the refs the answer
// cites, the context it was drafted in and the tokens it cost.
func checkSuggestion(t *testing.T, s, trigger *envelope.Envelope, answer string) {
	t.Helper()
	taskID := TaskID(trigger.ID)
	if s.Role != envelope.RoleAssistant || s.Content != answer {
		t.Fatalf("got %s %q, want the assistant suggestion %q", s.Role, s.Content, answer)
	}
	if s.Meta.TaskID != taskID || s.Meta.Thread != trigger.Meta.Thread {
		t.Errorf("got task %q thread %q, want %q %q", s.Meta.TaskID, s.Meta.Thread, taskID, trigger.Meta.Thread)
	}
	tg, err := s.Meta.Target()
	if err != nil || tg == nil || tg.Channel != "github" || tg.Owner != "Codertocat" || tg.Repo != "Hello-World" || tg.Number != 1 {
		t.Errorf("got target %+v (%v), want github Codertocat/Hello-World#1", tg, err)
	}
	if s.Channel != envelope.ChannelGitHub {
		t.Errorf("got channel %s, want github", s.Channel)
	}
	if !slices.Equal(s.RetrievalRefs, []string{"mem-readme"}) {
		t.Errorf("got retrieval_refs %v, want [mem-readme]", s.RetrievalRefs)
	}
	if u, _ := s.Meta.Get("unknown_refs"); !equalAny(u, []string{"made-up"}) {
		t.Errorf("got unknown_refs %v, want [made-up]", u)
	}
	if s.Meta.Source == nil || *s.Meta.Source != *trigger.Meta.Source {
		t.Errorf("got source %+v, want the trigger's %+v", s.Meta.Source, trigger.Meta.Source)
	}
	if s.Context == nil || !strings.Contains(s.Context.Session, "README typos") || s.Context.System == "" || !strings.Contains(s.Context.Task, "Spelling error") {
		t.Errorf("got context %+v, want system, session from memory and task", s.Context)
	}
	if s.Meta.Budget == nil || s.Meta.Budget.Tokens != 240 {
		t.Errorf("got budget %+v, want 240 tokens (2 calls x 120)", s.Meta.Budget)
	}
	if err := envelope.Validate(s); err != nil {
		t.Errorf("suggestion is not schema-valid: %v", err)
	}
}

func equalAny(v any, want []string) bool {
	list, ok := v.([]any)
	if !ok || len(list) != len(want) {
		return false
	}
	for i := range list {
		if list[i] != want[i] {
			return false
		}
	}
	return true
}

func TestRetrieveDocsIsAnsweredByTheAgent(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{
		callTool("retrieve_docs", map[string]any{"query": "spelling", "k": 2}),
		say("Per the style guide [[ref:doc-style]] and [[ref:mem-readme]]."),
	})
	h.publish(t, "in.slack.app_mention", slackMention(false, false))
	s := h.next(t)
	if !slices.Equal(s.RetrievalRefs, []string{"mem-readme", "doc-style"}) {
		t.Errorf("got retrieval_refs %v, want [mem-readme doc-style]", s.RetrievalRefs)
	}
	if _, ok := s.Meta.Get("unknown_refs"); ok {
		t.Errorf("got unknown_refs %v, want none", s.Meta.Extra["unknown_refs"])
	}
	tg, _ := s.Meta.Target()
	if tg == nil || tg.Channel != "slack" || tg.SlackCh != "C0LAN2Q65" || tg.ThreadTS != "1700000000.000100" {
		t.Errorf("got target %+v, want the Slack thread", tg)
	}
	if n := len(h.runner.received()); n != 0 {
		t.Errorf("got %d tool.call envelopes, want 0 (retrieve_docs is local)", n)
	}
	if out := h.llm.requests()[1].LastTool(); !strings.Contains(out, "[[ref:doc-style]]") {
		t.Errorf("got retrieve_docs output %q, want the doc ref", out)
	}
}

func TestToolFailureGoesBackToTheModel(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{
		callTool("everything__echo", map[string]any{"message": "hi"}),
		say("The echo server is offline, so here is my answer without it."),
	}, withRunner(&fakeRunner{fail: true}))
	h.publish(t, "in.github.issues", githubIssueOpened())
	s := h.next(t)
	if s.Role != envelope.RoleAssistant {
		t.Fatalf("got %s envelope %q, want a suggestion", s.Role, s.Content)
	}
	if got := h.llm.requests()[1].LastTool(); !strings.HasPrefix(got, "error: server everything is offline") {
		t.Errorf("got tool output %q, want the error", got)
	}
}

// TestStoredResultIsReadWhole: a tool result the tool runner stored whole in
// the object store (too large for one bus message) reaches the model whole
// when the model may see more than the start the bus carried.
func TestStoredResultIsReadWhole(t *testing.T) {
	t.Parallel()
	whole := strings.Repeat("a line of a long tool result\n", 200) + "THE END"
	h := setup(t, []reply{
		callTool("everything__echo", map[string]any{"message": "hi"}),
		say("Read it all."),
	}, withRunner(&fakeRunner{stored: whole}), withConfig(func(c *Config) { c.MaxToolOutput = 1 << 20 }))
	h.publish(t, "in.github.issues", githubIssueOpened())
	if s := h.next(t); s.Role != envelope.RoleAssistant {
		t.Fatalf("got %s envelope %q, want a suggestion", s.Role, s.Content)
	}
	if got := h.llm.requests()[1].LastTool(); got != whole {
		t.Errorf("model got a tool output of %d bytes ending %q, want the whole %d bytes", len(got), got[max(0, len(got)-20):], len(whole))
	}
}

func TestTriggersAndSelfAuthoredMessages(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{say("An answer.")})
	closed := githubIssueOpened()
	closed.Meta.Source.Action = "closed"
	botIssue := githubIssueOpened()
	botIssue.Meta.Set("bot", true)
	skipped := map[string]*envelope.Envelope{
		"issue closed":            closed,
		"comment without mention": githubComment("thanks!", "octocat"),
		"comment by the bot":      githubComment("@relay-bot said <!-- relay:abc -->", "relay-bot"),
		"comment with the marker": githubComment("<!-- relay:t1 --> Here is the answer, @relay-bot", "someone"),
		"issue by a bot":          botIssue,
		"slack bot message":       slackMention(true, false),
		"slack edit":              slackMention(false, true),
	}
	for name, e := range skipped {
		h.publish(t, "in."+string(e.Channel)+"."+e.Meta.Source.Event, e)
		_ = name
	}
	h.drained(t, ConsumerInbound, "in.x")
	if n := h.llm.count(); n != 0 {
		t.Fatalf("got %d LLM requests for messages that start no task, want 0", n)
	}
	for name, e := range skipped {
		if _, _, err := h.tasksGet(t, TaskID(e.ID)); !errors.Is(err, ErrTaskNotFound) {
			t.Errorf("%s: got task (err %v), want none", name, err)
		}
	}
	h.publish(t, "in.github.issue_comment", githubComment("@Relay-Bot can you help?", "octocat"))
	if s := h.next(t); s.Content != "An answer." {
		t.Errorf("got %q, want the answer to the mention", s.Content)
	}
}

func (h *harness) tasksGet(t *testing.T, id string) (*Task, uint64, error) {
	t.Helper()
	ts, err := OpenTasks(t.Context(), h.b, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ts.Get(t.Context(), id)
}

func TestRedeliveredTriggerIsOneTask(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{callTool("everything__echo", map[string]any{"message": "once"}), say("Done.")})
	trigger := githubIssueOpened()
	// Published twice with different message ids, so the bus stores both:
	// a redelivery after the de-duplication window.
	h.publish(t, "in.github.issues", trigger)
	h.publish(t, "in.github.issues", trigger)
	s := h.next(t)
	if s.Content != "Done." {
		t.Fatalf("got %q, want Done.", s.Content)
	}
	h.drained(t, ConsumerInbound, "in.x")
	h.drained(t, ConsumerResults, envelope.SubjectToolResult)
	h.none(t)
	if n := h.llm.count(); n != 2 {
		t.Errorf("got %d LLM requests, want 2 (one task)", n)
	}
	if n := len(h.runner.received()); n != 1 {
		t.Errorf("got %d tool calls, want 1", n)
	}
}

func TestRestartMidTaskResumes(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := setup(t, []reply{callTool("everything__echo", map[string]any{"message": "later"}), say("Resumed answer.")},
		withRunner(&fakeRunner{hold: hold}))
	// The setup's agent is stopped once its call is out; a new one finishes.
	h.publish(t, "in.github.issues", githubIssueOpened())
	testenv.WaitFor(t, 10*time.Second, "the tool call", func() bool { return len(h.runner.received()) == 1 })
	h.drained(t, ConsumerInbound, "in.x")
	h.stopAll(t)
	if n := h.llm.count(); n != 1 {
		t.Fatalf("got %d LLM requests before the restart, want 1", n)
	}
	close(hold) // the result is published while no agent runs
	h.start(t)
	s := h.next(t)
	if s.Content != "Resumed answer." {
		t.Fatalf("got %q, want the resumed answer", s.Content)
	}
	if n := h.llm.count(); n != 2 {
		t.Errorf("got %d LLM requests, want 2 (step 1 not repeated)", n)
	}
	if got := h.llm.requests()[1].LastTool(); got != "Echo: later" {
		t.Errorf("got tool output %q, want Echo: later", got)
	}
}

func TestStepLimitEndsWithNotice(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{callTool("everything__echo", map[string]any{"message": "again"})},
		withConfig(func(c *Config) { c.MaxSteps = 3 }))
	trigger := githubIssueOpened()
	h.publish(t, "in.github.issues", trigger)
	n := h.next(t)
	assertNotice(t, n, trigger, FailStepLimit)
	if got := h.llm.count(); got != 3 {
		t.Errorf("got %d LLM requests, want 3", got)
	}
	if got := len(h.runner.received()); got != 2 {
		t.Errorf("got %d tool calls, want 2 (the third step's calls are not run)", got)
	}
}

func TestTokenBudgetEndsWithNotice(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{callTool("everything__echo", map[string]any{"message": "again"})},
		withConfig(func(c *Config) { c.TokenBudget = 200 }))
	trigger := githubIssueOpened()
	h.publish(t, "in.github.issues", trigger)
	assertNotice(t, h.next(t), trigger, FailTokenBudget)
	if got := h.llm.count(); got != 2 {
		t.Errorf("got %d LLM requests, want 2 (120 tokens each, budget 200)", got)
	}
}

// The calls of one step run at once, so each is given an even share of the
// tokens the task has left for its server's sampling requests (meta.budget:
// limit - tokens), never the whole remainder each.
func TestParallelCallsShareTheTokenBudget(t *testing.T) {
	t.Parallel()
	two := func(w http.ResponseWriter, _ *fakes.ChatRequest) {
		call := func(id, msg string) map[string]any {
			return map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": "everything__echo", "arguments": `{"message":"` + msg + `"}`}}
		}
		writeJSON(w, completion(map[string]any{"role": "assistant", "content": nil,
			"tool_calls": []any{call("call_a", "a"), call("call_b", "b")}}))
	}
	const budget = 1000
	h := setup(t, []reply{two, say("Both echoed.")}, withConfig(func(c *Config) { c.TokenBudget = budget }))
	trigger := githubIssueOpened()
	h.publish(t, "in.github.issues", trigger)
	if s := h.next(t); s.Role != envelope.RoleAssistant || s.Content != "Both echoed." {
		t.Fatalf("got %s %q, want the suggestion", s.Role, s.Content)
	}
	calls := h.runner.received()
	if len(calls) != 2 {
		t.Fatalf("got %d tool calls, want 2", len(calls))
	}
	for _, c := range calls {
		b := c.Meta.Budget
		if b == nil || b.Tokens <= 0 || b.Tokens >= budget || b.Limit-b.Tokens != (budget-b.Tokens)/2 {
			t.Errorf("call %s: meta.budget %+v, want the task's tokens so far and half of the %d left", c.ToolCall.ID, b, budget)
		}
	}
}

func TestSamplingTokensCountAgainstTheBudget(t *testing.T) {
	t.Parallel()
	// 120 tokens per model call; the tool's server sampled 100 more: the
	// second call ends the task at 340 of 300 (without the sampling it
	// would take a third call).
	h := setup(t, []reply{callTool("everything__echo", map[string]any{"message": "again"})},
		withConfig(func(c *Config) { c.TokenBudget = 300 }), withRunner(&fakeRunner{sampling: 100}))
	trigger := githubIssueOpened()
	h.publish(t, "in.github.issues", trigger)
	assertNotice(t, h.next(t), trigger, FailTokenBudget)
	if got := h.llm.count(); got != 2 {
		t.Errorf("got %d LLM requests, want 2 (120 tokens each plus 100 sampled, budget 300)", got)
	}
}

func assertNotice(t *testing.T, n, trigger *envelope.Envelope, kind string) {
	t.Helper()
	if n.Role != envelope.RoleSystem {
		t.Fatalf("got %s envelope %q, want a notice", n.Role, n.Content)
	}
	var notice map[string]any
	if ok, err := n.Meta.Decode("notice", &notice); !ok || err != nil || notice["kind"] != kind {
		t.Errorf("got meta.notice %v, want kind %s", notice, kind)
	}
	if n.Meta.TaskID != TaskID(trigger.ID) || n.Meta.Thread != trigger.Meta.Thread {
		t.Errorf("got task %q thread %q, want the trigger's", n.Meta.TaskID, n.Meta.Thread)
	}
	if tg, _ := n.Meta.Target(); tg == nil || tg.Channel != "github" {
		t.Errorf("got target %+v, want the origin's", tg)
	}
	if !strings.Contains(n.Content, trigger.Meta.Source.URL) {
		t.Errorf("got notice %q, want the source link in it", n.Content)
	}
}

func TestLLMRetries(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{
		status(http.StatusTooManyRequests, "Retry-After-Ms", "300"),
		status(http.StatusServiceUnavailable),
		say("Answer after retries."),
	})
	h.publish(t, "in.github.issues", githubIssueOpened())
	if s := h.next(t); s.Content != "Answer after retries." {
		t.Fatalf("got %q, want the answer", s.Content)
	}
	if n := h.llm.count(); n != 3 {
		t.Errorf("got %d LLM requests, want 3", n)
	}
	h.llm.mu.Lock()
	gap := h.llm.times[1].Sub(h.llm.times[0])
	h.llm.mu.Unlock()
	if gap < 300*time.Millisecond {
		t.Errorf("got a retry %s after the 429, want at least its Retry-After of 300ms", gap)
	}
}

func TestLLMDownEndsWithNotice(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{status(http.StatusBadGateway)})
	trigger := githubIssueOpened()
	h.publish(t, "in.github.issues", trigger)
	n := h.next(t)
	assertNotice(t, n, trigger, FailLLMUnavailable)
	if got := h.llm.count(); got != 3 {
		t.Errorf("got %d LLM requests, want 3 (MaxTries)", got)
	}
	if !strings.Contains(n.Content, "502") {
		t.Errorf("got notice %q, want the status in the reason", n.Content)
	}
}

func TestLLMUnreachableEndsWithNotice(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{say("unused")})
	h.stopAll(t)
	h.llm.URL = "http://127.0.0.1:1/v1" // nothing listens
	h.start(t)
	trigger := githubIssueOpened()
	h.publish(t, "in.github.issues", trigger)
	assertNotice(t, h.next(t), trigger, FailLLMUnavailable)
}

func TestOffWithoutModel(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	svc, err := New(t.Context(), Config{}, b)
	if err != nil {
		t.Fatal(err)
	}
	if svc.Tasks() != nil {
		t.Error("got a task bucket, want none when the agent is off")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	testenv.Quiet(t, done, 100*time.Millisecond, "return of Run before ctx was cancelled")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("got %v, want nil", err)
	}
}

func TestTaskStateIsDurable(t *testing.T) {
	t.Parallel()
	h := setup(t, []reply{callTool("everything__echo", map[string]any{"message": "hi"}), say("Fine.")})
	trigger := githubIssueOpened()
	h.publish(t, "in.github.issues", trigger)
	h.next(t)
	// The task records the publish right after it: poll for the final state.
	var task *Task
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		task, _, err = h.tasksGet(t, TaskID(trigger.ID))
		if err != nil {
			t.Fatal(err)
		}
		if task.FinalPublished || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if task.Status != StatusDone || !task.FinalPublished || task.Step != 2 || task.Origin.ID != trigger.ID {
		t.Errorf("got task status %s published %v step %d, want done, published, 2", task.Status, task.FinalPublished, task.Step)
	}
	b, _ := json.Marshal(task)
	if strings.Contains(string(b), "Bearer") {
		t.Error("task state holds a credential")
	}
}

// stopAll stops every agent started on h so far.
func (h *harness) stopAll(t *testing.T) {
	t.Helper()
	for _, stop := range h.stops {
		stop()
	}
	h.stops = nil
}
