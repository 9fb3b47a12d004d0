package github

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	gh "github.com/google/go-github/v60/github"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/mappers"
)

// Bounds on header values copied into subjects and ids.
const (
	maxEventLen    = 100
	maxDeliveryLen = 200
)

// ErrNoEvent reports a request without an X-GitHub-Event header.
var ErrNoEvent = errors.New("missing X-GitHub-Event header")

// Map turns a verified webhook into one envelope on in.github.{event}. The body
// is JSON, or a form with a payload= field when the hook is configured for
// application/x-www-form-urlencoded. A body that is not a JSON object, or a
// request without X-GitHub-Event, is a *mappers.ParseError.
func (p *Provider) Map(r *mappers.Request) (mappers.Result, error) {
	event := strings.TrimSpace(r.Header.Get(HeaderEvent))
	if event == "" {
		return mappers.Result{}, &mappers.ParseError{Provider: Name, Err: ErrNoEvent}
	}
	if len(event) > maxEventLen {
		return mappers.Result{}, &mappers.ParseError{Provider: Name, Err: fmt.Errorf("X-GitHub-Event is longer than %d bytes", maxEventLen)}
	}
	payload, err := payloadOf(r)
	if err != nil {
		return mappers.Result{}, &mappers.ParseError{Provider: Name, Err: err}
	}
	f, err := p.extract(event, payload)
	if err != nil {
		return mappers.Result{}, &mappers.ParseError{Provider: Name, Err: fmt.Errorf("%s event: %w", event, err)}
	}
	delivery, msgID := deliveryIdentity(r)

	e := envelope.New(envelope.ChannelGitHub, f.role, f.text)
	if !r.Received.IsZero() {
		e.Timestamp = r.Received.UTC().Truncate(time.Microsecond)
	}
	e.Meta.Thread = f.thread()
	e.Meta.Source = &envelope.Source{Event: event, Action: f.action, DeliveryID: delivery, URL: f.url, Actor: f.actor}
	e.Meta.Budget = &envelope.Budget{Tokens: (len(f.text) + 3) / 4}
	if f.bot {
		e.Meta.Set("bot", true)
	}
	return mappers.Result{Items: []mappers.Item{{
		Subject:  envelope.Inbound(envelope.ChannelGitHub, event),
		MsgID:    msgID,
		Envelope: e,
	}}}, nil
}

// payloadOf returns the JSON payload of the request, as go-github's
// ValidatePayload does: the body itself, or its payload= form field.
func payloadOf(r *mappers.Request) ([]byte, error) {
	body := r.Body
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err == nil && mt == "application/x-www-form-urlencoded" {
			form, err := url.ParseQuery(string(body))
			if err != nil {
				return nil, fmt.Errorf("form body: %w", err)
			}
			body = []byte(form.Get("payload"))
		}
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("body is not a JSON object")
	}
	return body, nil
}

// deliveryIdentity returns the delivery id for meta.source and the Nats-Msg-Id,
// "github:{hook id}:{delivery}". Without X-GitHub-Delivery (GitHub always sends
// one) the delivery id is the SHA-256 of the body, so a byte-identical retry is
// still recognised.
func deliveryIdentity(r *mappers.Request) (delivery, msgID string) {
	delivery = strings.TrimSpace(r.Header.Get(HeaderDelivery))
	if len(delivery) > maxDeliveryLen {
		delivery = delivery[:maxDeliveryLen]
	}
	if delivery == "" {
		sum := sha256.Sum256(r.Body)
		delivery = "sha256:" + hex.EncodeToString(sum[:])
	}
	hook := strings.TrimSpace(r.Header.Get(HeaderHookID))
	if len(hook) > maxDeliveryLen {
		hook = hook[:maxDeliveryLen]
	}
	if hook == "" {
		hook = "-"
	}
	return delivery, "github:" + hook + ":" + delivery
}

// facts are what the mapping needs from any event, typed or generic.
type facts struct {
	event, action string
	owner, repo   string
	org           string
	actor         string
	bot           bool
	number        int    // issue, pull request or discussion number; 0 for none
	url           string // html URL of the object, else of the repository
	repoURL       string
	text          string
	role          envelope.Role
}

// thread is the conversation key: the issue, pull request or discussion when
// there is one, else the repository, else the organization.
func (f *facts) thread() string {
	switch {
	case f.owner != "" && f.repo != "" && f.number > 0:
		return envelope.GitHubThread(f.owner, f.repo, f.number)
	case f.owner != "" && f.repo != "":
		return "github:" + f.owner + "/" + f.repo
	case f.org != "":
		return "github:" + f.org
	}
	return ""
}

func (f *facts) where() string {
	switch {
	case f.owner != "" && f.repo != "":
		return f.owner + "/" + f.repo
	case f.org != "":
		return f.org
	}
	return "GitHub"
}

func (f *facts) who() string {
	if f.actor == "" {
		return "someone"
	}
	return f.actor
}

func (f *facts) setRepo(full, owner, name, htmlURL string) {
	if o, n, ok := strings.Cut(full, "/"); ok && o != "" && n != "" {
		owner, name = o, n
	}
	if owner == "" || name == "" {
		return
	}
	f.owner, f.repo, f.repoURL = owner, name, htmlURL
}

// extract decodes the payload: typed through go-github for the events it knows,
// generically otherwise (or when the typed decode disagrees with the JSON).
func (p *Provider) extract(event string, payload []byte) (*facts, error) {
	f := &facts{event: event, role: envelope.RoleUser}
	if ev := decodeTyped(event, payload); ev != nil {
		if p.typed(f, ev) {
			f.fallbackURL()
			return f, nil
		}
	}
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("body is not a JSON object")
	}
	p.generic(f, m)
	f.fallbackURL()
	return f, nil
}

// decodeTyped decodes payload into go-github's type for event, or returns nil
// for an event type go-github does not know or a payload that does not fit it.
// It uses goccy/go-json, a drop-in decoder about four times faster than
// encoding/json on these large structs (the typed decode dominated the
// gateway's CPU profile); encoding/json is the fallback if goccy refuses.
func decodeTyped(event string, payload []byte) any {
	ev := gh.EventForType(event)
	if ev == nil {
		return nil
	}
	if err := gojson.Unmarshal(payload, ev); err != nil {
		ev = gh.EventForType(event)
		if err := json.Unmarshal(payload, ev); err != nil {
			return nil
		}
	}
	return ev
}

func (f *facts) fallbackURL() {
	if f.url == "" {
		f.url = f.repoURL
	}
}

// Accessors the go-github event types share.
type (
	actionGetter interface{ GetAction() string }
	senderGetter interface{ GetSender() *gh.User }
	repoGetter   interface{ GetRepo() *gh.Repository }
	orgGetter    interface{ GetOrg() *gh.Organization }
	organization interface{ GetOrganization() *gh.Organization }
)

// typed fills f from a go-github event. It reports false for event types whose
// content is built generically.
func (p *Provider) typed(f *facts, ev any) bool {
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
	n := p.maxContent
	switch e := ev.(type) {
	case *gh.IssuesEvent:
		is := e.GetIssue()
		f.number, f.url = is.GetNumber(), is.GetHTMLURL()
		head := fmt.Sprintf("%s %s issue #%d in %s: %s", f.who(), f.action, is.GetNumber(), f.where(), is.GetTitle())
		head += issueDetail(f.action, e.GetLabel(), e.GetAssignee(), e.GetMilestone())
		f.text = withBody(head, is.GetBody(), f.action == "opened" || f.action == "edited", n)
	case *gh.IssueCommentEvent:
		is, c := e.GetIssue(), e.GetComment()
		f.number, f.url = is.GetNumber(), c.GetHTMLURL()
		kind := "issue"
		if is != nil && is.IsPullRequest() {
			kind = "pull request"
		}
		f.text = withBody(fmt.Sprintf("%s %s %s #%d in %s: %s", f.who(), commentVerb(f.action), kind, is.GetNumber(), f.where(), is.GetTitle()),
			c.GetBody(), f.action != "deleted", n)
	case *gh.PullRequestEvent:
		pr := e.GetPullRequest()
		f.number, f.url = pr.GetNumber(), pr.GetHTMLURL()
		if f.number == 0 {
			f.number = e.GetNumber()
		}
		head := fmt.Sprintf("%s %s pull request #%d in %s: %s", f.who(), prVerb(f.action, pr.GetMerged(), e.GetRequestedReviewer(), e.GetRequestedTeam()), f.number, f.where(), pr.GetTitle())
		head += issueDetail(f.action, e.GetLabel(), e.GetAssignee(), nil)
		if f.action == "opened" || f.action == "ready_for_review" {
			head += fmt.Sprintf(" (%s → %s)", pr.GetHead().GetRef(), pr.GetBase().GetRef())
		}
		f.text = withBody(head, pr.GetBody(), f.action == "opened" || f.action == "edited", n)
	case *gh.PullRequestReviewEvent:
		pr, rv := e.GetPullRequest(), e.GetReview()
		f.number, f.url = pr.GetNumber(), rv.GetHTMLURL()
		f.text = withBody(fmt.Sprintf("%s %s pull request #%d in %s: %s", f.who(), reviewVerb(f.action, rv.GetState()), pr.GetNumber(), f.where(), pr.GetTitle()),
			rv.GetBody(), f.action != "dismissed", n)
	case *gh.PullRequestReviewCommentEvent:
		pr, c := e.GetPullRequest(), e.GetComment()
		f.number, f.url = pr.GetNumber(), c.GetHTMLURL()
		where := ""
		if c.GetPath() != "" {
			where = " " + c.GetPath() + " in"
		}
		f.text = withBody(fmt.Sprintf("%s %s%s pull request #%d in %s: %s", f.who(), commentVerb(f.action), where, pr.GetNumber(), f.where(), pr.GetTitle()),
			c.GetBody(), f.action != "deleted", n)
	case *gh.PullRequestReviewThreadEvent:
		pr := e.GetPullRequest()
		f.number, f.url = pr.GetNumber(), pr.GetHTMLURL()
		f.text = fmt.Sprintf("%s %s a review thread on pull request #%d in %s: %s", f.who(), f.action, pr.GetNumber(), f.where(), pr.GetTitle())
	case *gh.DiscussionEvent:
		d := e.GetDiscussion()
		f.number, f.url = d.GetNumber(), d.GetHTMLURL()
		head := fmt.Sprintf("%s %s discussion #%d in %s: %s", f.who(), f.action, d.GetNumber(), f.where(), d.GetTitle())
		if c := d.GetDiscussionCategory().GetName(); c != "" {
			head += " [" + c + "]"
		}
		f.text = withBody(head, d.GetBody(), f.action == "created" || f.action == "edited", n)
	case *gh.DiscussionCommentEvent:
		d, c := e.GetDiscussion(), e.GetComment()
		f.number, f.url = d.GetNumber(), c.GetHTMLURL()
		f.text = withBody(fmt.Sprintf("%s %s discussion #%d in %s: %s", f.who(), commentVerb(f.action), d.GetNumber(), f.where(), d.GetTitle()),
			c.GetBody(), f.action != "deleted", n)
	case *gh.PushEvent:
		repo := e.GetRepo()
		f.setRepo(repo.GetFullName(), repo.GetOwner().GetLogin(), repo.GetName(), repo.GetHTMLURL())
		if f.actor == "" {
			f.actor = e.GetPusher().GetName()
		}
		f.url = e.GetCompare()
		f.text = pushText(f, e, n)
	case *gh.ReleaseEvent:
		rel := e.GetRelease()
		f.url = rel.GetHTMLURL()
		head := fmt.Sprintf("%s %s release %s in %s", f.who(), f.action, rel.GetTagName(), f.where())
		if rel.GetName() != "" && rel.GetName() != rel.GetTagName() {
			head += ": " + rel.GetName()
		}
		if rel.GetPrerelease() {
			head += " (pre-release)"
		}
		f.text = withBody(head, rel.GetBody(), f.action == "published" || f.action == "created" || f.action == "edited", n)
	case *gh.WorkflowRunEvent:
		run := e.GetWorkflowRun()
		f.url = run.GetHTMLURL()
		if run != nil && len(run.PullRequests) > 0 {
			prs := run.PullRequests
			f.number = prs[0].GetNumber()
		}
		f.text = fmt.Sprintf("workflow %q run #%d %s in %s: %s on %s (%s), triggered by %s",
			run.GetName(), run.GetRunNumber(), f.action, f.where(), outcome(run.GetStatus(), run.GetConclusion()),
			run.GetHeadBranch(), short(run.GetHeadSHA()), f.who())
	case *gh.WorkflowJobEvent:
		job := e.GetWorkflowJob()
		f.url = job.GetHTMLURL()
		f.text = fmt.Sprintf("job %q of workflow %q %s in %s: %s on %s (%s)",
			job.GetName(), job.GetWorkflowName(), f.action, f.where(), outcome(job.GetStatus(), job.GetConclusion()),
			job.GetHeadBranch(), short(job.GetHeadSHA()))
	case *gh.CheckRunEvent:
		cr := e.GetCheckRun()
		f.url = cr.GetHTMLURL()
		if cr != nil && len(cr.PullRequests) > 0 {
			prs := cr.PullRequests
			f.number = prs[0].GetNumber()
		}
		head := fmt.Sprintf("check run %q %s in %s: %s on %s", cr.GetName(), f.action, f.where(),
			outcome(cr.GetStatus(), cr.GetConclusion()), short(cr.GetHeadSHA()))
		if ra := e.GetRequestedAction(); ra != nil && ra.Identifier != "" {
			id := ra.Identifier
			head += fmt.Sprintf(" (%s requested action %q)", f.who(), id)
		}
		body := cr.GetOutput().GetTitle()
		if s := cr.GetOutput().GetSummary(); s != "" {
			body = strings.TrimSpace(body + "\n" + s)
		}
		f.text = withBody(head, body, true, n)
	case *gh.CheckSuiteEvent:
		cs := e.GetCheckSuite()
		if cs != nil && len(cs.PullRequests) > 0 {
			prs := cs.PullRequests
			f.number = prs[0].GetNumber()
		}
		f.text = fmt.Sprintf("check suite of %s %s in %s: %s on %s (%s)", cs.GetApp().GetName(), f.action, f.where(),
			outcome(cs.GetStatus(), cs.GetConclusion()), cs.GetHeadBranch(), short(cs.GetHeadSHA()))
	case *gh.CommitCommentEvent:
		c := e.GetComment()
		f.url = c.GetHTMLURL()
		f.text = withBody(fmt.Sprintf("%s %s commit %s in %s", f.who(), commentVerb(f.action), short(c.GetCommitID()), f.where()),
			c.GetBody(), true, n)
	case *gh.PingEvent:
		f.role = envelope.RoleSystem
		f.url = f.repoURL
		var events []string
		if e.GetHook() != nil {
			events = e.GetHook().Events
		}
		f.text = fmt.Sprintf("GitHub webhook %d is set up for %s (events: %s): %s", e.GetHookID(), f.where(),
			strings.Join(events, ", "), e.GetZen())
	default:
		return false
	}
	return true
}

// generic fills f from any JSON object: the fields every webhook shares, the
// issue, pull request or discussion it is about, and the object named after
// the event (label, milestone, package, ...).
func (p *Provider) generic(f *facts, m map[string]any) {
	if f.action == "" {
		f.action = str(m, "action")
	}
	f.actor = str(m, "sender", "login")
	f.bot = str(m, "sender", "type") == "Bot"
	f.setRepo(str(m, "repository", "full_name"), str(m, "repository", "owner", "login"), str(m, "repository", "name"), str(m, "repository", "html_url"))
	if org := str(m, "organization", "login"); org != "" {
		f.org = org
	} else if acct := str(m, "installation", "account", "login"); acct != "" {
		f.org = acct // app installations: the account installed on
	}
	verb := f.action
	if verb == "" {
		verb = "sent"
	}
	for _, k := range []string{"issue", "pull_request", "discussion"} {
		if n := num(m, k, "number"); n > 0 {
			f.number = n
			f.url = str(m, k, "html_url")
			f.text = fmt.Sprintf("%s %s %s on %s #%d in %s: %s", f.who(), verb, f.event, strings.ReplaceAll(k, "_", " "), n, f.where(), str(m, k, "title"))
			return
		}
	}
	// Runs and checks of a pull request join its thread.
	for _, k := range []string{"workflow_run", "check_run", "check_suite"} {
		obj, _ := m[k].(map[string]any)
		prs, _ := obj["pull_requests"].([]any)
		if len(prs) == 0 {
			continue
		}
		first, _ := prs[0].(map[string]any)
		if n := num(first, "number"); n > 0 {
			f.number = n
			break
		}
	}
	what := f.event
	for _, k := range []string{f.event, strings.TrimSuffix(f.event, "_event")} {
		obj, ok := m[k].(map[string]any)
		if !ok {
			continue
		}
		for _, field := range []string{"title", "name", "login", "full_name", "tag_name", "ref", "key"} {
			if s, ok := obj[field].(string); ok && s != "" {
				what += " " + s
				break
			}
		}
		f.url, _ = obj["html_url"].(string)
		break
	}
	if ref := str(m, "ref"); ref != "" && !strings.Contains(what, " ") {
		what += " " + strings.TrimSpace(str(m, "ref_type")+" "+ref)
	}
	f.text = fmt.Sprintf("%s %s %s in %s", f.who(), verb, what, f.where())
	if f.event == "ping" {
		f.role = envelope.RoleSystem
	}
}

// str walks nested objects and returns the string at the end, or "".
func str(m map[string]any, path ...string) string {
	var v any = m
	for _, k := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = o[k]
	}
	s, _ := v.(string)
	return s
}

// num is str for a positive whole number.
func num(m map[string]any, path ...string) int {
	var v any = m
	for _, k := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return 0
		}
		v = o[k]
	}
	f, ok := v.(float64)
	if !ok || f < 1 || f > 1<<31 || f != float64(int(f)) {
		return 0
	}
	return int(f)
}

func withBody(head, body string, include bool, n int) string {
	body = strings.TrimSpace(strings.ReplaceAll(body, "\r\n", "\n"))
	if !include || body == "" {
		return head
	}
	return head + "\n\n" + mappers.Trim(body, n)
}

func issueDetail(action string, label *gh.Label, assignee *gh.User, milestone *gh.Milestone) string {
	switch action {
	case "labeled", "unlabeled":
		if label != nil {
			return " (label: " + label.GetName() + ")"
		}
	case "assigned", "unassigned":
		if assignee != nil {
			return " (assignee: " + assignee.GetLogin() + ")"
		}
	case "milestoned", "demilestoned":
		if milestone != nil {
			return " (milestone: " + milestone.GetTitle() + ")"
		}
	}
	return ""
}

func commentVerb(action string) string {
	switch action {
	case "edited":
		return "edited a comment on"
	case "deleted":
		return "deleted a comment on"
	}
	return "commented on"
}

func prVerb(action string, merged bool, reviewer *gh.User, team *gh.Team) string {
	switch action {
	case "closed":
		if merged {
			return "merged"
		}
	case "synchronize":
		return "pushed commits to"
	case "ready_for_review":
		return "marked ready for review"
	case "converted_to_draft":
		return "converted to draft"
	case "review_requested", "review_request_removed":
		who := reviewer.GetLogin()
		if who == "" && team != nil {
			who = "team " + team.GetName()
		}
		if action == "review_requested" {
			return "requested a review from " + who + " on"
		}
		return "removed the review request for " + who + " on"
	case "auto_merge_enabled":
		return "enabled auto-merge on"
	case "auto_merge_disabled":
		return "disabled auto-merge on"
	case "enqueued":
		return "added to the merge queue"
	case "dequeued":
		return "removed from the merge queue"
	}
	return action
}

func reviewVerb(action, state string) string {
	switch action {
	case "dismissed":
		return "dismissed a review on"
	case "edited":
		return "edited a review on"
	}
	switch strings.ToLower(state) {
	case "approved":
		return "approved"
	case "changes_requested":
		return "requested changes on"
	}
	return "reviewed"
}

func outcome(status, conclusion string) string {
	if conclusion != "" {
		return status + "/" + conclusion
	}
	if status == "" {
		return "unknown"
	}
	return status
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

const maxPushLines = 20

func pushText(f *facts, e *gh.PushEvent, n int) string {
	ref := e.GetRef()
	kind := "branch"
	name := strings.TrimPrefix(ref, "refs/heads/")
	if strings.HasPrefix(ref, "refs/tags/") {
		kind, name = "tag", strings.TrimPrefix(ref, "refs/tags/")
	}
	if e.GetDeleted() {
		return fmt.Sprintf("%s deleted %s %s in %s", f.who(), kind, name, f.where())
	}
	verb := "pushed"
	if e.GetForced() {
		verb = "force-pushed"
	}
	count := len(e.Commits)
	if e.GetSize() > count {
		count = e.GetSize()
	}
	var b strings.Builder
	if e.GetCreated() {
		fmt.Fprintf(&b, "%s created %s %s in %s", f.who(), kind, name, f.where())
		if count > 0 {
			fmt.Fprintf(&b, " with %d commit(s)", count)
		}
	} else {
		fmt.Fprintf(&b, "%s %s %d commit(s) to %s %s in %s", f.who(), verb, count, kind, name, f.where())
	}
	for i, c := range e.Commits {
		if i == maxPushLines {
			fmt.Fprintf(&b, "\n… and %d more", len(e.Commits)-i)
			break
		}
		msg, _, _ := strings.Cut(c.GetMessage(), "\n")
		fmt.Fprintf(&b, "\n- %s %s", short(c.GetID()), mappers.Trim(msg, 200))
		if b.Len() > n {
			break
		}
	}
	return mappers.Trim(b.String(), n+200)
}
