package github

import (
	"strings"

	gh "github.com/google/go-github/v60/github"

	"github.com/relaystation/relay/envelope"
)

// setFacts stores meta.facts: the repository and number every event kind
// shares, and what the event's filler gathered in f.fx.
func (f *facts) setFacts(e *envelope.Envelope) {
	if f.owner != "" && f.repo != "" {
		f.fx.Str("repository", f.owner+"/"+f.repo)
	}
	f.fx.Int("number", f.number)
	f.fx.SetOn(e)
}

// issueFacts records an issue's title, state and label names.
func (f *facts) issueFacts(is *gh.Issue) {
	if is == nil {
		return
	}
	f.fx.Str("title", is.GetTitle())
	f.fx.Str("state", is.GetState())
	f.fx.List("labels", labelNames(is.Labels))
}

// prFacts records a pull request's title, state, labels, head branch (branch),
// base branch (base) and head commit (sha).
func (f *facts) prFacts(pr *gh.PullRequest) {
	if pr == nil {
		return
	}
	f.fx.Str("title", pr.GetTitle())
	state := pr.GetState()
	if pr.GetMerged() {
		state = "merged"
	}
	f.fx.Str("state", state)
	f.fx.List("labels", labelNames(pr.Labels))
	f.fx.Str("branch", pr.GetHead().GetRef())
	f.fx.Str("base", pr.GetBase().GetRef())
	f.fx.Str("sha", pr.GetHead().GetSHA())
}

// refFacts records a git reference: ref as given, and branch or tag (the
// short name) by kind ("branch", "tag", or "" to tell by a refs/ prefix).
func (f *facts) refFacts(kind, ref, sha string) {
	f.fx.Str("ref", ref)
	switch {
	case strings.HasPrefix(ref, "refs/heads/"):
		f.fx.Str("branch", strings.TrimPrefix(ref, "refs/heads/"))
	case strings.HasPrefix(ref, "refs/tags/"):
		f.fx.Str("tag", strings.TrimPrefix(ref, "refs/tags/"))
	case kind == "branch" || kind == "tag":
		f.fx.Str(kind, ref)
	}
	f.fx.Str("sha", sha)
}

// genericFacts records title, state and labels of the issue, pull request or
// discussion under key k of a payload no go-github type decoded.
func (f *facts) genericFacts(m map[string]any, k string) {
	f.fx.Str("title", str(m, k, "title"))
	f.fx.Str("state", str(m, k, "state"))
	obj, _ := m[k].(map[string]any)
	ls, _ := obj["labels"].([]any)
	names := make([]string, 0, len(ls))
	for _, l := range ls {
		if o, ok := l.(map[string]any); ok {
			names = append(names, str(o, "name"))
		}
	}
	f.fx.List("labels", names)
}

// branchFacts records the branch and head commit of a run, job or check.
func (f *facts) branchFacts(branch, sha string) {
	f.fx.Str("branch", branch)
	f.fx.Str("sha", sha)
}

func labelNames(ls []*gh.Label) []string {
	names := make([]string, 0, len(ls))
	for _, l := range ls {
		names = append(names, l.GetName())
	}
	return names
}
