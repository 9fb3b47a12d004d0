package github

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	gh "github.com/google/go-github/v60/github"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/mappers"
)

// Bounds on header values copied into subjects and ids.
const (
	maxEventLen    = 100
	maxDeliveryLen = 200
)

// The GitHub header names as http.Header keys: Header.Get converts a name
// not in this form (X-GitHub-Event) on every call, allocating.
var (
	keyEvent    = http.CanonicalHeaderKey(HeaderEvent)
	keyDelivery = http.CanonicalHeaderKey(HeaderDelivery)
	keyHookID   = http.CanonicalHeaderKey(HeaderHookID)
)

// ErrNoEvent reports a request without an X-GitHub-Event header.
var ErrNoEvent = errors.New("missing X-GitHub-Event header")

// Map turns a verified webhook into one envelope on in.github.{event}. The body
// is JSON, or a form with a payload= field when the hook is configured for
// application/x-www-form-urlencoded. A body that is not a JSON object, or a
// request without X-GitHub-Event, is a *mappers.ParseError.
func (p *Provider) Map(r *mappers.Request) (mappers.Result, error) {
	event := strings.TrimSpace(r.Header.Get(keyEvent))
	if event == "" {
		return mappers.Result{}, &mappers.ParseError{Provider: Name, Err: ErrNoEvent}
	}
	if len(event) > maxEventLen {
		return mappers.Result{}, &mappers.ParseError{Provider: Name, Err: fmt.Errorf("X-GitHub-Event is longer than %d bytes", maxEventLen)}
	}
	payload, err := payloadOf(r)
	if err != nil {
		return mappers.Result{}, &mappers.ParseError{Provider: Name, Err: mappers.CheckContentType(r, mappers.JSON, err)}
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
	e.Meta.Budget = &envelope.Budget{Tokens: envelope.EstimateTokens(f.text)}
	if f.bot {
		e.Meta.Set("bot", true)
	}
	f.setFacts(e)
	return mappers.One(envelope.Inbound(envelope.ChannelGitHub, event), msgID, e), nil
}

// payloadOf returns the JSON payload of the request, as go-github's
// ValidatePayload does: the body itself, or its payload= form field.
func payloadOf(r *mappers.Request) ([]byte, error) {
	body := r.Body
	// Most hooks send application/json: no media type to parse (and no
	// parameter map to allocate) for it.
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/json" {
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
	delivery = strings.TrimSpace(r.Header.Get(keyDelivery))
	if len(delivery) > maxDeliveryLen {
		delivery = delivery[:maxDeliveryLen]
	}
	if delivery == "" {
		sum := sha256.Sum256(r.Body)
		delivery = "sha256:" + hex.EncodeToString(sum[:])
	}
	hook := strings.TrimSpace(r.Header.Get(keyHookID))
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
	fx            mappers.Facts // meta.facts beyond repository and number
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
		if p.typed(f, event, ev) {
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
//
// The busiest kinds are decoded leanly (lean.go) first.
func decodeTyped(event string, payload []byte) any {
	if lean, ok := leanKinds[event]; ok {
		if ev, err := lean(payload); err == nil {
			return ev
		}
	}
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
			f.genericFacts(m, k)
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
	f.refFacts(str(m, "ref_type"), str(m, "ref"), "")
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
	return head + "\n\n" + mappers.Clip(body, n)
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
		fmt.Fprintf(&b, "\n- %s %s", short(c.GetID()), clip.To(msg, 200))
		if b.Len() > n {
			break
		}
	}
	return clip.To(b.String(), n+200)
}
