package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/github"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools"
)

// The end-to-end suite runs the relay as a user does (every service in one
// process, from environment variables) against local servers that speak the
// real APIs: a fake Slack Web API, a fake GitHub REST API, a scripted
// OpenAI-compatible model, and the real MCP "everything" server over stdio.

const (
	e2eTeam     = "T0TEAM"
	e2eChannel  = "C0APPROVALS"
	e2eApprover = "U0APPROVER"
	e2eStranger = "U0STRANGER"
	e2eGHSecret = "gh-webhook-secret"
	e2eSlackSec = "slack-signing-secret"
)

type stack struct {
	t     testing.TB
	env   map[string]string
	base  string
	slack *fakes.Slack
	gh    *fakes.GitHub
	llm   *fakes.LLM
	nc    *nats.Conn
	stop  func()
	logs  *syncBuffer // the relay's log
	// slackSecret signs the stack's Slack requests; "" is e2eSlackSec.
	slackSecret string
}

// attach connects the stack's test client to the NATS server at url and
// waits until the tool runner lists tools for the agent.
func (s *stack) attach(t testing.TB, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	must(t, err)
	t.Cleanup(nc.Close)
	s.nc = nc
	testenv.WaitFor(t, 30*time.Second, "the tool runner to list tools", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		list, err := tools.ListRemote(ctx, nc, "relay", "agent")
		return err == nil && len(list) > 0
	})
}

// script is the model: per scenario marker in the issue title it decides what
// to answer. "tool" scenarios call the echo tool first.
func script(req *fakes.ChatRequest) fakes.Reply {
	text := req.Text()
	switch {
	case strings.Contains(text, "scenario:per-user") && !req.HasToolResult() && toolName(req, "whoami") != "":
		return fakes.Reply{ToolCalls: []fakes.ToolCall{{Name: toolName(req, "whoami")}}}
	case strings.Contains(text, "scenario:per-user"):
		return fakes.Reply{Text: "The per-user tool said: " + req.LastTool()}
	case strings.Contains(text, "scenario:llm-down"):
		return fakes.Reply{Status: http.StatusServiceUnavailable}
	case strings.Contains(text, "scenario:tool-fails") && !req.HasToolResult():
		return fakes.Reply{ToolCalls: []fakes.ToolCall{{Name: toolName(req, "get-sum"), Args: map[string]any{"a": "not a number"}}}}
	case !req.HasToolResult() && toolName(req, "echo") != "":
		return fakes.Reply{ToolCalls: []fakes.ToolCall{{Name: toolName(req, "echo"), Args: map[string]any{"message": "checked the logs"}}}}
	}
	return fakes.Reply{Text: "Thanks for the report. The tool says: checked the logs. We will look at the login crash."}
}

// toolName finds the offered function whose name ends in suffix.
func toolName(req *fakes.ChatRequest, suffix string) string {
	for _, n := range req.ToolNames() {
		if strings.HasSuffix(n, suffix) {
			return n
		}
	}
	return ""
}

// stackEnv is the relay's environment for a stack on the given fakes, with
// the real everything server over stdio.
func stackEnv(t testing.TB, sl *fakes.Slack, gh *fakes.GitHub, llm *fakes.LLM) map[string]string {
	mcp := fmt.Sprintf(`{"servers": {"everything": {"command": %q, "args": ["stdio"]}}}`, testenv.NPMBin(t, "mcp-server-everything"))
	env := embeddedEnv(t)
	maps.Copy(env, loopEnv(t, mcp, sl, gh, llm))
	return env
}

// loopEnv is what the whole loop needs on the given fakes: the MCP servers of
// mcpJSON with a policy that lets the agent call them, webhook secrets,
// provider APIs, the model and the approvals channel.
func loopEnv(t testing.TB, mcpJSON string, sl *fakes.Slack, gh *fakes.GitHub, llm *fakes.LLM) map[string]string {
	dir := t.TempDir()
	policy := "roles:\n  - role: agent\n    capabilities: [\"everything.*\"]\n"
	must(t, os.WriteFile(filepath.Join(dir, "mcp.json"), []byte(mcpJSON), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(policy), 0o600))
	return map[string]string{
		"RELAY_MCP_CONFIG":       filepath.Join(dir, "mcp.json"),
		"RELAY_POLICY":           filepath.Join(dir, "policy.yaml"),
		"GITHUB_WEBHOOK_SECRET":  e2eGHSecret,
		"SLACK_SIGNING_SECRET":   e2eSlackSec,
		"GITHUB_API_URL":         gh.URL(),
		"GITHUB_TOKEN":           "ghp_e2etoken000000000000000000000000000",
		"SLACK_API_URL":          sl.URL(),
		"SLACK_BOT_TOKEN":        "xoxb-e2e-token",
		"SLACK_APPROVAL_CHANNEL": e2eChannel,
		"SLACK_APPROVERS":        e2eApprover,
		"LLM_BASE_URL":           llm.URL(),
		"LLM_MODEL":              "scripted",
		"RELAY_AGENT_MENTION":    "@relay-bot",
		"RELAY_LOG_LEVEL":        "warn",
		// These tests send many triggers from one actor and repository;
		// the per-source limits have tests of their own.
		"RELAY_LIMIT_TASKS_PER_REPO":    "0",
		"RELAY_LIMIT_TASKS_PER_CHANNEL": "0",
		"RELAY_LIMIT_TASKS_PER_ACTOR":   "0",
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// startStack runs `relay serve` in-process until the test ends.
func startStack(t testing.TB, mod func(map[string]string)) *stack {
	t.Helper()
	s := &stack{t: t, slack: fakes.NewSlack(t), gh: fakes.NewGitHub(t)}
	s.llm = fakes.NewLLM(t, script)
	s.env = stackEnv(t, s.slack, s.gh, s.llm)
	if mod != nil {
		mod(s.env)
	}
	s.base = "http://" + s.env["RELAY_HTTP_ADDR"]
	var logs syncBuffer
	s.logs = &logs
	stop := serveRelay(t, s.env, &logs)
	s.stop = sync.OnceFunc(func() {
		if code := stop(); code != 0 {
			t.Errorf("relay exited %d; log:\n%s", code, logs.String())
		}
	})
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("relay log:\n%s", logs.String())
		}
	})
	waitHTTP(t, s.base+"/readyz", http.StatusOK, 20*time.Second)
	// The agent offers MCP tools once the runner has its session.
	s.attach(t, "nats://"+s.env["RELAY_NATS_LISTEN"])
	return s
}

// issueOpened posts a real issues.opened webhook for issue number with the
// scenario marker in its title, and returns the issue's target string.
func (s *stack) issueOpened(number int, scenario string) string {
	s.t.Helper()
	return s.issueOpenedAs(number, scenario, uuid.NewString())
}

// issueOpenedAs is issueOpened with the given X-GitHub-Delivery.
func (s *stack) issueOpenedAs(number int, scenario, delivery string) string {
	s.t.Helper()
	body, target := openedIssue(issuesOpenedPayload(s.t), number, scenario)
	s.send(githubWebhook(s.t.Context(), s.base, e2eGHSecret, "issues", delivery, body))
	return target
}

// send sends a webhook request to the relay and wants its 200.
func (s *stack) send(req *http.Request) {
	s.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	must(s.t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("webhook answered %d, want 200", resp.StatusCode)
	}
}

// issuesOpenedPayload is a real issues.opened webhook payload (valid JSON):
// the octokit example, else the GitHub mapper's test payload.
func issuesOpenedPayload(t testing.TB) []byte {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "npm", "node_modules", "@octokit", "webhooks-examples",
		"api.github.com", "issues", "opened.payload.json"))
	if err != nil {
		raw, err = os.ReadFile(filepath.Join("..", "..", "mappers", "github", "testdata", "payloads", "issues.opened.json"))
	}
	must(t, err)
	if !json.Valid(raw) {
		t.Fatalf("issues.opened payload: got invalid JSON")
	}
	return raw
}

// openedIssue is payload (from issuesOpenedPayload) about issue number,
// with the scenario marker in its title, and the issue's target string.
func openedIssue(payload []byte, number int, scenario string) (body []byte, target string) {
	var p map[string]any
	_ = json.Unmarshal(payload, &p) // valid JSON: issuesOpenedPayload checked
	issue := p["issue"].(map[string]any)
	repo := p["repository"].(map[string]any)
	issue["number"] = number
	issue["title"] = "Login crashes with emoji passwords scenario:" + scenario
	issue["html_url"] = fmt.Sprintf("%s/issues/%d", repo["html_url"], number)
	body, _ = json.Marshal(p) // of what json.Unmarshal made
	return body, fmt.Sprintf("%s#%d", repo["full_name"], number)
}

// githubWebhook is a GitHub webhook of event with body to the relay at base,
// signed with secret (the stack's is e2eGHSecret), as delivery.
func githubWebhook(ctx context.Context, base, secret, event, delivery string, body []byte) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhooks/github", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	github.SetHeaders(req.Header, event, delivery, "42", github.Sign([]byte(secret), body))
	return req
}

// approvalPost waits for the approval message about target and returns it.
func (s *stack) approvalPost(target string) fakes.SlackCall {
	s.t.Helper()
	var found fakes.SlackCall
	testenv.WaitFor(s.t, 30*time.Second, "the approval message for "+target, func() bool {
		for _, c := range s.slack.Calls("chat.postMessage") {
			if c.Params["channel"] == e2eChannel && strings.Contains(c.Params["text"]+c.Params["blocks"], target) && len(c.Actions()) == 3 {
				found = c
				return true
			}
		}
		return false
	})
	return found
}

func action(t testing.TB, post fakes.SlackCall, suffix string) fakes.Action {
	t.Helper()
	for _, a := range post.Actions() {
		if strings.HasSuffix(a.ActionID, suffix) {
			return a
		}
	}
	t.Fatalf("no %s button in %v", suffix, post.Actions())
	return fakes.Action{}
}

// interact posts a signed interaction payload as Slack does.
func (s *stack) interact(payload []byte) {
	s.t.Helper()
	s.postSlack(slack.RouteInteractions, "application/x-www-form-urlencoded", fakes.FormPayload(payload))
}

func (s *stack) click(user string, post fakes.SlackCall, suffix string) {
	s.t.Helper()
	s.interact(fakes.BlockActions(e2eTeam, user, e2eChannel, post.Params["_ts"], "trig-"+uuid.NewString(), action(s.t, post, suffix)))
}

func (s *stack) comments(number int) []fakes.Comment {
	var out []fakes.Comment
	for _, c := range s.gh.Comments() {
		if c.Number == number {
			out = append(out, c)
		}
	}
	return out
}

// exactlyOneComment waits for the comment on issue number, then makes sure no
// second one follows.
func (s *stack) exactlyOneComment(number int) fakes.Comment {
	s.t.Helper()
	testenv.WaitFor(s.t, 30*time.Second, fmt.Sprintf("a comment on #%d", number), func() bool { return len(s.comments(number)) > 0 })
	time.Sleep(time.Second) // a duplicate would land now
	cs := s.comments(number)
	if len(cs) != 1 {
		s.t.Fatalf("got %d comments on #%d, want exactly 1: %+v", len(cs), number, cs)
	}
	return cs[0]
}

// with is the stack seen from test t (a subtest), so its helpers fail t.
func (s *stack) with(t testing.TB) *stack {
	c := *s
	c.t = t
	return &c
}

// submitModal has the approver click action (edit, reject) on post, and
// submits the modal that opens for issue number with values (block id to
// action id to value).
func (s *stack) submitModal(post fakes.SlackCall, action string, number int, values map[string]map[string]string) {
	s.t.Helper()
	s.submitModalAs(e2eApprover, post, action, fmt.Sprintf("#%d", number), values)
}

// submitModalAs has user click action on post and submits the modal that
// opens about what (text the modal shows) with values.
func (s *stack) submitModalAs(user string, post fakes.SlackCall, action, about string, values map[string]map[string]string) {
	s.t.Helper()
	s.click(user, post, action)
	view := s.modal("relay_approval_"+action, about)
	s.interact(fakes.ViewSubmission(e2eTeam, user, "trig-"+uuid.NewString(), view, values))
}

// modal waits for the modal with callback id callback that the approvals
// worker opened about what (text the modal shows, "#12" for issue 12).
func (s *stack) modal(callback, about string) fakes.SlackCall {
	s.t.Helper()
	var view fakes.SlackCall
	testenv.WaitFor(s.t, 20*time.Second, "the "+callback+" modal", func() bool {
		for _, c := range s.slack.Calls("views.open") {
			if strings.Contains(c.Params["view"], callback) && strings.Contains(c.Params["view"], about) {
				view = c
				return true
			}
		}
		return false
	})
	return view
}

// updatedTo waits for a chat.update of the approval message whose text contains want.
func (s *stack) updatedTo(post fakes.SlackCall, want string) {
	s.t.Helper()
	testenv.WaitFor(s.t, 20*time.Second, "the approval message updated to "+want, func() bool {
		for _, c := range s.slack.Calls("chat.update") {
			if c.Params["ts"] == post.Params["_ts"] && strings.Contains(c.Params["text"]+c.Params["blocks"], want) {
				return true
			}
		}
		return false
	})
}

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "end-to-end")
	s := startStack(t, nil)
	var n atomic.Int32
	next := func() int { return 1000 + int(n.Add(1)) }

	for _, sc := range []struct {
		name string
		run  func(t *testing.T, s *stack, num int)
	}{
		{"approve posts exactly one GitHub comment", e2eApprove},
		{"edit then approve posts the edited text", e2eEditThenApprove},
		{"reject with a reason posts nothing", e2eReject},
		{"a non-approver is refused", e2eNonApprover},
		{"a double click posts once", e2eDoubleClick},
		{"a failing tool goes back to the model", e2eFailingTool},
		{"the model down ends in a notice, not a post", e2eModelDown},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, s.with(t), next())
		})
	}
}

// e2eApprove: approve posts exactly one GitHub comment.
func e2eApprove(t *testing.T, s *stack, num int) {
	target := s.issueOpened(num, "approve")
	post := s.approvalPost(target)
	if !strings.Contains(post.Params["blocks"], "checked the logs") {
		t.Errorf("suggestion lacks the model's text: %s", post.Params["blocks"])
	}
	if len(s.comments(num)) != 0 {
		t.Fatal("a comment was posted before approval")
	}
	s.click(e2eApprover, post, "approve")
	c := s.exactlyOneComment(num)
	if !strings.Contains(c.Body, "The tool says: checked the logs") {
		t.Errorf("comment %q lacks the approved text", c.Body)
	}
	if c.Token != "ghp_e2etoken000000000000000000000000000" {
		t.Errorf("comment made with token %q", c.Token)
	}
	s.updatedTo(post, e2eApprover)
	// The tool really ran: the model's second request carries the echo result.
	found := false
	for _, r := range s.llm.Requests() {
		if strings.Contains(r.Text(), "Echo: checked the logs") {
			found = true
		}
	}
	if !found {
		t.Error("no model request carried the echo tool's result")
	}
}

// e2eEditThenApprove: edit then approve posts the edited text.
func e2eEditThenApprove(t *testing.T, s *stack, num int) {
	post := s.approvalPost(s.issueOpened(num, "edit"))
	s.submitModal(post, "edit", num, map[string]map[string]string{"text_0": {"text": "Edited by the supervisor: fixed in 1.2.3."}})
	s.updatedTo(post, "Edited by the supervisor")
	s.click(e2eApprover, post, "approve")
	c := s.exactlyOneComment(num)
	if !strings.Contains(c.Body, "Edited by the supervisor: fixed in 1.2.3.") || strings.Contains(c.Body, "checked the logs") {
		t.Errorf("comment %q, want the edited text only", c.Body)
	}
}

// e2eReject: reject with a reason posts nothing.
func e2eReject(t *testing.T, s *stack, num int) {
	post := s.approvalPost(s.issueOpened(num, "reject"))
	s.submitModal(post, "reject", num, map[string]map[string]string{"reason": {"reason": "duplicate of #7"}})
	s.updatedTo(post, "duplicate of #7")
	s.click(e2eApprover, post, "approve") // too late: rejected stays rejected
	time.Sleep(2 * time.Second)
	if cs := s.comments(num); len(cs) != 0 {
		t.Fatalf("got %d comments after a rejection, want 0", len(cs))
	}
}

// e2eNonApprover: a non-approver is refused.
func e2eNonApprover(t *testing.T, s *stack, num int) {
	post := s.approvalPost(s.issueOpened(num, "stranger"))
	s.click(e2eStranger, post, "approve")
	testenv.WaitFor(t, 20*time.Second, "an ephemeral refusal", func() bool {
		for _, c := range s.slack.Calls("chat.postEphemeral") {
			if c.Params["user"] == e2eStranger {
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second)
	if cs := s.comments(num); len(cs) != 0 {
		t.Fatalf("a non-approver's click posted %d comments", len(cs))
	}
	s.click(e2eApprover, post, "approve") // the real approver still can
	s.exactlyOneComment(num)
}

// e2eDoubleClick: a double click posts once.
func e2eDoubleClick(t *testing.T, s *stack, num int) {
	post := s.approvalPost(s.issueOpened(num, "double"))
	done := make(chan struct{})
	for range 3 {
		go func() { s.click(e2eApprover, post, "approve"); done <- struct{}{} }()
	}
	for range 3 {
		<-done
	}
	s.exactlyOneComment(num)
}

// e2eFailingTool: a failing tool goes back to the model.
func e2eFailingTool(t *testing.T, s *stack, num int) {
	post := s.approvalPost(s.issueOpened(num, "tool-fails"))
	if !strings.Contains(post.Params["blocks"], "Thanks for the report") {
		t.Errorf("suggestion after a failed tool: %s", post.Params["blocks"])
	}
	sawError := false
	for _, r := range s.llm.Requests() {
		if strings.Contains(r.Text(), "scenario:tool-fails") && r.HasToolResult() && strings.Contains(strings.ToLower(r.Text()), "error") {
			sawError = true
		}
	}
	if !sawError {
		t.Error("the model never saw the tool's error")
	}
}

// e2eModelDown: the model down ends in a notice, not a post.
func e2eModelDown(t *testing.T, s *stack, num int) {
	s.issueOpened(num, "llm-down")
	sub, err := s.nc.SubscribeSync("relay.agent.notice")
	must(t, err)
	defer sub.Unsubscribe()
	js, _ := s.nc.JetStream()
	testenv.WaitFor(t, 60*time.Second, "an agent.notice for the task", func() bool {
		m, err := js.GetLastMsg("RELAY_WORK", "relay.agent.notice")
		if err != nil {
			return false
		}
		e, err := envelope.Parse(m.Data)
		return err == nil && strings.Contains(e.Content+fmt.Sprint(e.Meta.Extra), fmt.Sprintf("/%d", num))
	})
	if cs := s.comments(num); len(cs) != 0 {
		t.Fatalf("got %d comments with the model down", len(cs))
	}
}

func TestEndToEndExpiry(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "end-to-end")
	s := startStack(t, func(env map[string]string) {
		env["RELAY_APPROVAL_TTL"] = "3s"
		env["RELAY_APPROVAL_SWEEP"] = "1s"
	})
	num := 2001
	post := s.approvalPost(s.issueOpened(num, "expire"))
	s.updatedTo(post, "Expired")
	s.click(e2eApprover, post, "approve")
	time.Sleep(2 * time.Second)
	if cs := s.comments(num); len(cs) != 0 {
		t.Fatalf("an expired suggestion posted %d comments", len(cs))
	}
}
