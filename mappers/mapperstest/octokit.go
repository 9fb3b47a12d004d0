package mapperstest

// The @octokit/webhooks-examples fixtures and an independent reading of the
// thread each example belongs to, shared by the GitHub provider's tests and
// the gateway's tests.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/testenv"
)

// OctokitExample is one example webhook: its event name and raw payload.
type OctokitExample struct {
	Event   string
	Payload json.RawMessage
}

// repoRoot is the repository's top directory, found from this file.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the repository")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// OctokitExamples reads every example of the npm package
// @octokit/webhooks-examples (api.github.com), installed by scripts/setup.sh.
func OctokitExamples(t testing.TB) []OctokitExample {
	t.Helper()
	path := filepath.Join(repoRoot(t), "testdata", "npm", "node_modules", "@octokit", "webhooks-examples", "api.github.com", "index.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		testenv.Missing(t, "npm fixtures: run scripts/setup.sh (npm ci in testdata/npm): %v", err)
	}
	var index []struct {
		Name     string            `json:"name"`
		Examples []json.RawMessage `json:"examples"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var out []OctokitExample
	for _, ev := range index {
		for _, p := range ev.Examples {
			out = append(out, OctokitExample{Event: ev.Name, Payload: p})
		}
	}
	return out
}

// GitHubThread derives the thread key from the raw JSON independently of the
// mapper: the issue, pull request or discussion number when the payload has one.
func GitHubThread(t testing.TB, event string, payload []byte) (thread string, action string) {
	t.Helper()
	var p struct {
		Action     string `json:"action"`
		Repository *struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
		Organization *struct{ Login string } `json:"organization"`
		Installation *struct {
			Account *struct{ Login string } `json:"account"`
		} `json:"installation"`
		Number      int                   `json:"number"`
		Issue       *struct{ Number int } `json:"issue"`
		PullRequest *struct{ Number int } `json:"pull_request"`
		Discussion  *struct{ Number int } `json:"discussion"`
		CheckRun    *struct {
			PullRequests []struct{ Number int } `json:"pull_requests"`
		} `json:"check_run"`
		CheckSuite *struct {
			PullRequests []struct{ Number int } `json:"pull_requests"`
		} `json:"check_suite"`
		WorkflowRun *struct {
			PullRequests []struct{ Number int } `json:"pull_requests"`
		} `json:"workflow_run"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		t.Fatalf("decode example: %v", err)
	}
	n := 0
	switch {
	case p.Issue != nil:
		n = p.Issue.Number
	case p.PullRequest != nil:
		n = p.PullRequest.Number
	case p.Discussion != nil:
		n = p.Discussion.Number
	case p.CheckRun != nil && len(p.CheckRun.PullRequests) > 0:
		n = p.CheckRun.PullRequests[0].Number
	case p.CheckSuite != nil && len(p.CheckSuite.PullRequests) > 0:
		n = p.CheckSuite.PullRequests[0].Number
	case p.WorkflowRun != nil && len(p.WorkflowRun.PullRequests) > 0:
		n = p.WorkflowRun.PullRequests[0].Number
	}
	if n == 0 && strings.HasPrefix(event, "pull_request") {
		n = p.Number
	}
	switch {
	case p.Repository != nil && n > 0:
		owner, repo, _ := strings.Cut(p.Repository.FullName, "/")
		return envelope.GitHubThread(owner, repo, n), p.Action
	case p.Repository != nil:
		return "github:" + p.Repository.FullName, p.Action
	case p.Organization != nil:
		return "github:" + p.Organization.Login, p.Action
	case p.Installation != nil && p.Installation.Account != nil:
		return "github:" + p.Installation.Account.Login, p.Action
	}
	return "", p.Action
}
