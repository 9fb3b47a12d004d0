package github

import (
	"fmt"
	"strconv"
	"strings"

	gh "github.com/google/go-github/v60/github"

	"github.com/relaystation/relay/envelope"
)

// filler fills the facts of one decoded go-github event with at most n runes
// of its body. It reports false when ev is not the type it reads.
type filler func(f *facts, ev any, n int) bool

// kind adapts a function of one event type to a filler.
func kind[E any](fill func(f *facts, e *E, n int)) filler {
	return func(f *facts, ev any, n int) bool {
		e, ok := ev.(*E)
		if ok {
			fill(f, e, n)
		}
		return ok
	}
}

// typedKinds are the event kinds whose content is built from go-github's
// types, by X-GitHub-Event; every other kind is built generically.
var typedKinds = map[string]filler{
	"issues":                      kind((*facts).issues),
	"issue_comment":               kind((*facts).issueComment),
	"pull_request":                kind((*facts).pullRequest),
	"pull_request_review":         kind((*facts).review),
	"pull_request_review_comment": kind((*facts).reviewComment),
	"pull_request_review_thread":  kind((*facts).reviewThread),
	"discussion":                  kind((*facts).discussion),
	"discussion_comment":          kind((*facts).discussionComment),
	"push":                        kind((*facts).push),
	"release":                     kind((*facts).release),
	"workflow_run":                kind((*facts).workflowRun),
	"workflow_job":                kind((*facts).workflowJob),
	"check_run":                   kind((*facts).checkRun),
	"check_suite":                 kind((*facts).checkSuite),
	"commit_comment":              kind((*facts).commitComment),
	"ping":                        kind((*facts).ping),
}

// Accessors the go-github event types share.
type (
	actionGetter interface{ GetAction() string }
	senderGetter interface{ GetSender() *gh.User }
	repoGetter   interface{ GetRepo() *gh.Repository }
	orgGetter    interface{ GetOrg() *gh.Organization }
	organization interface{ GetOrganization() *gh.Organization }
)

// typed fills f from a go-github event of kind event. It reports false for
// event kinds whose content is built generically; the fields every event
// shares (action, sender, repository, organization) are filled either way.
func (p *Provider) typed(f *facts, event string, ev any) bool {
	f.shared(ev)
	fill, ok := typedKinds[event]
	return ok && fill(f, ev, p.maxContent)
}

// shared fills the fields the go-github event types share.
func (f *facts) shared(ev any) {
	if a, ok := ev.(actionGetter); ok {
		f.action = a.GetAction()
	}
	if s, ok := ev.(senderGetter); ok && s.GetSender() != nil {
		f.actor = s.GetSender().GetLogin()
		f.bot = s.GetSender().GetType() == "Bot"
	}
	if r, ok := ev.(repoGetter); ok && r.GetRepo() != nil {
		repo := r.GetRepo()
		f.setRepo(repo.GetFullName(), repo.GetOwner().GetLogin(), repo.GetName(), repo.GetHTMLURL())
	}
	if o, ok := ev.(orgGetter); ok && o.GetOrg() != nil {
		f.org = o.GetOrg().GetLogin()
	}
	if o, ok := ev.(organization); ok && o.GetOrganization() != nil {
		f.org = o.GetOrganization().GetLogin()
	}
}

func (f *facts) issues(e *gh.IssuesEvent, n int) {
	is := e.GetIssue()
	f.number, f.url = is.GetNumber(), is.GetHTMLURL()
	f.issueFacts(is)
	// Concatenated, not formatted: the busiest kinds are built on every webhook.
	head := f.who() + " " + f.action + " issue #" + strconv.Itoa(is.GetNumber()) + " in " + f.where() + ": " + is.GetTitle()
	head += issueDetail(f.action, e.GetLabel(), e.GetAssignee(), e.GetMilestone())
	f.text = withBody(head, is.GetBody(), f.action == "opened" || f.action == "edited", n)
}

func (f *facts) issueComment(e *gh.IssueCommentEvent, n int) {
	is, c := e.GetIssue(), e.GetComment()
	f.number, f.url = is.GetNumber(), c.GetHTMLURL()
	f.issueFacts(is)
	kind := "issue"
	if is != nil && is.IsPullRequest() {
		kind = "pull request"
	}
	head := f.who() + " " + commentVerb(f.action) + " " + kind + " #" + strconv.Itoa(is.GetNumber()) + " in " + f.where() + ": " + is.GetTitle()
	f.text = withBody(head, c.GetBody(), f.action != "deleted", n)
}

func (f *facts) pullRequest(e *gh.PullRequestEvent, n int) {
	pr := e.GetPullRequest()
	f.number, f.url = pr.GetNumber(), pr.GetHTMLURL()
	if f.number == 0 {
		f.number = e.GetNumber()
	}
	f.prFacts(pr)
	verb := prVerb(f.action, pr.GetMerged(), e.GetRequestedReviewer(), e.GetRequestedTeam())
	head := f.who() + " " + verb + " pull request #" + strconv.Itoa(f.number) + " in " + f.where() + ": " + pr.GetTitle()
	head += issueDetail(f.action, e.GetLabel(), e.GetAssignee(), nil)
	if f.action == "opened" || f.action == "ready_for_review" {
		head += " (" + pr.GetHead().GetRef() + " → " + pr.GetBase().GetRef() + ")"
	}
	f.text = withBody(head, pr.GetBody(), f.action == "opened" || f.action == "edited", n)
}

func (f *facts) review(e *gh.PullRequestReviewEvent, n int) {
	pr, rv := e.GetPullRequest(), e.GetReview()
	f.number, f.url = pr.GetNumber(), rv.GetHTMLURL()
	f.prFacts(pr)
	f.text = withBody(fmt.Sprintf("%s %s pull request #%d in %s: %s", f.who(), reviewVerb(f.action, rv.GetState()), pr.GetNumber(), f.where(), pr.GetTitle()),
		rv.GetBody(), f.action != "dismissed", n)
}

func (f *facts) reviewComment(e *gh.PullRequestReviewCommentEvent, n int) {
	pr, c := e.GetPullRequest(), e.GetComment()
	f.number, f.url = pr.GetNumber(), c.GetHTMLURL()
	f.prFacts(pr)
	where := ""
	if c.GetPath() != "" {
		where = " " + c.GetPath() + " in"
	}
	f.text = withBody(fmt.Sprintf("%s %s%s pull request #%d in %s: %s", f.who(), commentVerb(f.action), where, pr.GetNumber(), f.where(), pr.GetTitle()),
		c.GetBody(), f.action != "deleted", n)
}

func (f *facts) reviewThread(e *gh.PullRequestReviewThreadEvent, _ int) {
	pr := e.GetPullRequest()
	f.number, f.url = pr.GetNumber(), pr.GetHTMLURL()
	f.prFacts(pr)
	f.text = fmt.Sprintf("%s %s a review thread on pull request #%d in %s: %s", f.who(), f.action, pr.GetNumber(), f.where(), pr.GetTitle())
}

func (f *facts) discussion(e *gh.DiscussionEvent, n int) {
	d := e.GetDiscussion()
	f.number, f.url = d.GetNumber(), d.GetHTMLURL()
	f.fx.Str("title", d.GetTitle())
	f.fx.Str("state", d.GetState())
	head := fmt.Sprintf("%s %s discussion #%d in %s: %s", f.who(), f.action, d.GetNumber(), f.where(), d.GetTitle())
	if c := d.GetDiscussionCategory().GetName(); c != "" {
		head += " [" + c + "]"
	}
	f.text = withBody(head, d.GetBody(), f.action == "created" || f.action == "edited", n)
}

func (f *facts) discussionComment(e *gh.DiscussionCommentEvent, n int) {
	d, c := e.GetDiscussion(), e.GetComment()
	f.number, f.url = d.GetNumber(), c.GetHTMLURL()
	f.fx.Str("title", d.GetTitle())
	f.fx.Str("state", d.GetState())
	f.text = withBody(fmt.Sprintf("%s %s discussion #%d in %s: %s", f.who(), commentVerb(f.action), d.GetNumber(), f.where(), d.GetTitle()),
		c.GetBody(), f.action != "deleted", n)
}

func (f *facts) push(e *gh.PushEvent, n int) {
	repo := e.GetRepo()
	f.setRepo(repo.GetFullName(), repo.GetOwner().GetLogin(), repo.GetName(), repo.GetHTMLURL())
	if f.actor == "" {
		f.actor = e.GetPusher().GetName()
	}
	f.url = e.GetCompare()
	f.refFacts("", e.GetRef(), e.GetAfter())
	f.text = pushText(f, e, n)
}

func (f *facts) release(e *gh.ReleaseEvent, n int) {
	rel := e.GetRelease()
	f.url = rel.GetHTMLURL()
	f.fx.Str("tag", rel.GetTagName())
	head := fmt.Sprintf("%s %s release %s in %s", f.who(), f.action, rel.GetTagName(), f.where())
	if rel.GetName() != "" && rel.GetName() != rel.GetTagName() {
		head += ": " + rel.GetName()
	}
	if rel.GetPrerelease() {
		head += " (pre-release)"
	}
	f.text = withBody(head, rel.GetBody(), f.action == "published" || f.action == "created" || f.action == "edited", n)
}

// firstPR returns the number of the first pull request of a run, job or
// suite, or 0.
func firstPR(prs []*gh.PullRequest) int {
	if len(prs) == 0 {
		return 0
	}
	return prs[0].GetNumber()
}

func (f *facts) workflowRun(e *gh.WorkflowRunEvent, _ int) {
	run := e.GetWorkflowRun()
	f.url = run.GetHTMLURL()
	f.branchFacts(run.GetHeadBranch(), run.GetHeadSHA())
	if run != nil {
		f.number = firstPR(run.PullRequests)
	}
	f.text = fmt.Sprintf("workflow %q run #%d %s in %s: %s on %s (%s), triggered by %s",
		run.GetName(), run.GetRunNumber(), f.action, f.where(), outcome(run.GetStatus(), run.GetConclusion()),
		run.GetHeadBranch(), short(run.GetHeadSHA()), f.who())
}

func (f *facts) workflowJob(e *gh.WorkflowJobEvent, _ int) {
	job := e.GetWorkflowJob()
	f.url = job.GetHTMLURL()
	f.branchFacts(job.GetHeadBranch(), job.GetHeadSHA())
	f.text = fmt.Sprintf("job %q of workflow %q %s in %s: %s on %s (%s)",
		job.GetName(), job.GetWorkflowName(), f.action, f.where(), outcome(job.GetStatus(), job.GetConclusion()),
		job.GetHeadBranch(), short(job.GetHeadSHA()))
}

func (f *facts) checkRun(e *gh.CheckRunEvent, n int) {
	cr := e.GetCheckRun()
	f.url = cr.GetHTMLURL()
	f.branchFacts(cr.GetCheckSuite().GetHeadBranch(), cr.GetHeadSHA())
	if cr != nil {
		f.number = firstPR(cr.PullRequests)
	}
	head := fmt.Sprintf("check run %q %s in %s: %s on %s", cr.GetName(), f.action, f.where(),
		outcome(cr.GetStatus(), cr.GetConclusion()), short(cr.GetHeadSHA()))
	if ra := e.GetRequestedAction(); ra != nil && ra.Identifier != "" {
		head += fmt.Sprintf(" (%s requested action %q)", f.who(), ra.Identifier)
	}
	body := cr.GetOutput().GetTitle()
	if s := cr.GetOutput().GetSummary(); s != "" {
		body = strings.TrimSpace(body + "\n" + s)
	}
	f.text = withBody(head, body, true, n)
}

func (f *facts) checkSuite(e *gh.CheckSuiteEvent, _ int) {
	cs := e.GetCheckSuite()
	f.branchFacts(cs.GetHeadBranch(), cs.GetHeadSHA())
	if cs != nil {
		f.number = firstPR(cs.PullRequests)
	}
	f.text = fmt.Sprintf("check suite of %s %s in %s: %s on %s (%s)", cs.GetApp().GetName(), f.action, f.where(),
		outcome(cs.GetStatus(), cs.GetConclusion()), cs.GetHeadBranch(), short(cs.GetHeadSHA()))
}

func (f *facts) commitComment(e *gh.CommitCommentEvent, n int) {
	c := e.GetComment()
	f.url = c.GetHTMLURL()
	f.fx.Str("sha", c.GetCommitID())
	f.text = withBody(fmt.Sprintf("%s %s commit %s in %s", f.who(), commentVerb(f.action), short(c.GetCommitID()), f.where()),
		c.GetBody(), true, n)
}

func (f *facts) ping(e *gh.PingEvent, _ int) {
	f.role = envelope.RoleSystem
	f.url = f.repoURL
	var events []string
	if e.GetHook() != nil {
		events = e.GetHook().Events
	}
	f.text = fmt.Sprintf("GitHub webhook %d is set up for %s (events: %s): %s", e.GetHookID(), f.where(),
		strings.Join(events, ", "), e.GetZen())
}
