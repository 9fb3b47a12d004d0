package sentry

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/secret"
)

// Name is the provider's route name.
const Name = "sentry"

// MetaKey is the meta extra key under which Sentry details are kept.
const MetaKey = "sentry"

// The resources of Sentry-Hook-Resource this package maps specifically.
const (
	ResourceInstallation = "installation"
	ResourceEventAlert   = "event_alert"
	ResourceIssue        = "issue"
	ResourceMetricAlert  = "metric_alert"
	ResourceError        = "error"
	ResourceComment      = "comment"
)

// Config configures the Sentry provider.
type Config struct {
	// Secret is the integration's client secret (SENTRY_CLIENT_SECRET). Unset
	// means every request is refused.
	Secret secret.Value
	// Org is the organization slug used in thread keys. Empty means the
	// installation uuid of each webhook.
	Org string
	// Now is the clock, used when a request carries no Received time; nil means
	// time.Now.
	Now func() time.Time
}

// Provider verifies and maps Sentry webhooks. It implements mappers.Provider
// and is safe for concurrent use.
type Provider struct {
	cfg Config
}

var _ mappers.Provider = (*Provider)(nil)

// New returns a Sentry provider.
func New(cfg Config) *Provider {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Provider{cfg: cfg}
}

// Name returns "sentry".
func (p *Provider) Name() string { return Name }

// id is a Sentry identifier, sent as a string or a number depending on the
// resource.
type id = mappers.ID

type hook struct {
	Action       string `json:"action"`
	Installation struct {
		UUID string `json:"uuid"`
	} `json:"installation"`
	Actor struct {
		Type string `json:"type"`
		ID   id     `json:"id"`
		Name string `json:"name"`
	} `json:"actor"`
	Data json.RawMessage `json:"data"`
}

type project struct {
	ID   id     `json:"id"`
	Slug string `json:"slug"`
	Name string `json:"name"`
}

type issueData struct {
	Issue *struct {
		ID         id      `json:"id"`
		ShortID    string  `json:"shortId"`
		Title      string  `json:"title"`
		Culprit    string  `json:"culprit"`
		Level      string  `json:"level"`
		Status     string  `json:"status"`
		Substatus  string  `json:"substatus"`
		Permalink  string  `json:"permalink"`
		WebURL     string  `json:"web_url"`
		URL        string  `json:"url"`
		Project    project `json:"project"`
		AssignedTo *struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Email string `json:"email"`
		} `json:"assignedTo"`
	} `json:"issue"`
}

// event is the shape of data.event (event_alert) and data.error (error).
type event struct {
	EventID  string `json:"event_id"`
	IssueID  id     `json:"issue_id"`
	Title    string `json:"title"`
	Message  string `json:"message"`
	Culprit  string `json:"culprit"`
	Level    string `json:"level"`
	WebURL   string `json:"web_url"`
	URL      string `json:"url"`
	IssueURL string `json:"issue_url"`
	Project  id     `json:"project"`
}

type eventAlertData struct {
	Event         *event `json:"event"`
	TriggeredRule string `json:"triggered_rule"`
	IssueAlert    *struct {
		Title string `json:"title"`
	} `json:"issue_alert"`
}

type errorData struct {
	Error *event `json:"error"`
}

type metricAlertData struct {
	DescriptionText  string `json:"description_text"`
	DescriptionTitle string `json:"description_title"`
	WebURL           string `json:"web_url"`
	MetricAlert      *struct {
		ID         id       `json:"id"`
		Identifier id       `json:"identifier"`
		Title      string   `json:"title"`
		Projects   []string `json:"projects"`
		AlertRule  struct {
			ID   id     `json:"id"`
			Name string `json:"name"`
		} `json:"alert_rule"`
	} `json:"metric_alert"`
}

type commentData struct {
	Comment     *string `json:"comment"`
	ProjectSlug string  `json:"project_slug"`
	CommentID   id      `json:"comment_id"`
	IssueID     id      `json:"issue_id"`
	Timestamp   string  `json:"timestamp"`
}

type installationData struct {
	Installation *struct {
		UUID         string `json:"uuid"`
		Status       string `json:"status"`
		Organization struct {
			Slug string `json:"slug"`
		} `json:"organization"`
		App struct {
			UUID string `json:"uuid"`
			Slug string `json:"slug"`
		} `json:"app"`
	} `json:"installation"`
}

// mapped is what a resource mapping produces before the common envelope work.
type mapped struct {
	role     envelope.Role
	content  string
	objectID string
	issueID  string // threads by SentryThread(org, issueID) when set
	url      string
	extra    map[string]any
	facts    mappers.Facts // meta.facts
}

// Map turns a verified Sentry webhook into one envelope. A missing
// Sentry-Hook-Resource or a body that is not the resource's JSON is a
// *mappers.ParseError.
func (p *Provider) Map(r *mappers.Request) (mappers.Result, error) {
	resource := strings.TrimSpace(r.Header.Get(HeaderResource))
	if resource == "" {
		return mappers.Result{}, parseErr(errors.New("missing " + HeaderResource))
	}
	var h hook
	if err := json.Unmarshal(r.Body, &h); err != nil {
		return mappers.Result{}, parseErr(mappers.CheckContentType(r, mappers.JSON, fmt.Errorf("%s body: %w", resource, err)))
	}
	if d := bytes.TrimSpace(h.Data); len(d) > 0 && d[0] != '{' && string(d) != "null" {
		return mappers.Result{}, parseErr(fmt.Errorf("%s: data is not an object", resource))
	}
	idResource, err := bodyResource(resource, h.Data)
	if err != nil {
		return mappers.Result{}, parseErr(err)
	}
	actor := h.Actor.Name
	if actor == "" {
		actor = string(h.Actor.ID)
	}

	m, err := mapResource(resource, &h, actor)
	if err != nil {
		return mappers.Result{}, parseErr(fmt.Errorf("%s: %w", resource, err))
	}

	sum := sha256.Sum256(r.Body)
	msgID := "sentry:" + idResource + ":" + h.Action + ":" + m.objectID + ":" + hex.EncodeToString(sum[:])

	e := envelope.New(envelope.ChannelSentry, m.role, mappers.Clip(m.content, mappers.MaxContent))
	e.Meta.Budget = &envelope.Budget{Tokens: envelope.EstimateTokens(e.Content)}
	at := r.Received
	if at.IsZero() {
		at = p.cfg.Now()
	}
	e.Timestamp = at.UTC().Truncate(time.Microsecond)
	e.Meta.Source = &envelope.Source{
		Event:      trim(resource),
		Action:     trim(h.Action),
		DeliveryID: trim(msgID),
		URL:        trim(m.url),
		Actor:      trim(actor),
	}
	org := p.org(&h)
	if m.issueID != "" {
		e.Meta.Thread = envelope.SentryThread(org, m.issueID)
	}
	extra := m.extra
	if extra == nil {
		extra = map[string]any{}
	}
	extra["resource"] = resource
	setIf(extra, "installation", h.Installation.UUID)
	setIf(extra, "org", p.cfg.Org)
	setIf(extra, "actor_type", h.Actor.Type)
	setIf(extra, "request_id", r.Header.Get(HeaderRequestID))
	e.Meta.Set(MetaKey, mappers.TrimStrings(extra, mappers.MaxContent))
	m.facts.SetOn(e)
	return mappers.One(envelope.Inbound(envelope.ChannelSentry, resource), msgID, e), nil
}

// mapResource maps the hook by its Sentry-Hook-Resource.
func mapResource(resource string, h *hook, actor string) (mapped, error) {
	switch resource {
	case ResourceIssue:
		return mapIssue(h, actor)
	case ResourceEventAlert:
		return mapEventAlert(h)
	case ResourceMetricAlert:
		return mapMetricAlert(h)
	case ResourceError:
		return mapError(h)
	case ResourceComment:
		return mapComment(h, actor)
	case ResourceInstallation:
		return mapInstallation(h, actor)
	}
	return mapGeneric(resource, h, actor), nil
}

// org is the organization part of thread keys (see the package doc).
func (p *Provider) org(h *hook) string {
	if p.cfg.Org != "" {
		return p.cfg.Org
	}
	if h.Installation.UUID != "" {
		return h.Installation.UUID
	}
	return "unknown"
}

func mapIssue(h *hook, actor string) (mapped, error) {
	var d issueData
	if err := unmarshalData(h, &d); err != nil {
		return mapped{}, err
	}
	is := d.Issue
	if is == nil || is.ID == "" {
		return mapped{}, errors.New("data.issue.id missing")
	}
	name := cmp.Or(is.ShortID, "#"+string(is.ID))
	var b strings.Builder
	fmt.Fprintf(&b, "Sentry issue %s '%s' was %s", name, is.Title, cmp.Or(h.Action, "changed"))
	if h.Action == "assigned" && is.AssignedTo != nil {
		fmt.Fprintf(&b, " to %s", cmp.Or(is.AssignedTo.Name, is.AssignedTo.Email))
	}
	if h.Actor.Type == "user" && actor != "" {
		fmt.Fprintf(&b, " by %s", actor)
	}
	if is.Project.Slug != "" {
		fmt.Fprintf(&b, " in project %s", is.Project.Slug)
	}
	b.WriteString(details(is.Level, status(is.Status, is.Substatus), is.Culprit))
	extra := map[string]any{"issue_id": string(is.ID)}
	setIf(extra, "short_id", is.ShortID)
	setIf(extra, "project", is.Project.Slug)
	setIf(extra, "level", is.Level)
	setIf(extra, "status", is.Status)
	setIf(extra, "substatus", is.Substatus)
	setIf(extra, "title", is.Title)
	setIf(extra, "api_url", is.URL)
	var fx mappers.Facts
	fx.Str("issue_id", string(is.ID))
	fx.Str("short_id", is.ShortID)
	fx.Str("project", is.Project.Slug)
	fx.Str("level", is.Level)
	fx.Str("culprit", is.Culprit)
	fx.Str("title", is.Title)
	fx.Str("status", is.Status)
	return mapped{
		role: envelope.RoleUser, content: b.String(), objectID: string(is.ID), issueID: string(is.ID),
		url: cmp.Or(is.WebURL, is.Permalink), extra: extra, facts: fx,
	}, nil
}

func mapEventAlert(h *hook) (mapped, error) {
	var d eventAlertData
	if err := unmarshalData(h, &d); err != nil {
		return mapped{}, err
	}
	ev := d.Event
	if ev == nil {
		return mapped{}, errors.New("data.event missing")
	}
	rule := d.TriggeredRule
	if rule == "" && d.IssueAlert != nil {
		rule = d.IssueAlert.Title
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Sentry alert rule '%s' %s", rule, cmp.Or(h.Action, "triggered"))
	if ev.IssueID != "" {
		fmt.Fprintf(&b, " for issue %s", ev.IssueID)
	}
	b.WriteString(": " + cmp.Or(ev.Title, ev.Message, ev.EventID))
	b.WriteString(details(ev.Level, "", ev.Culprit))
	m := eventMapped(ev, b.String())
	setIf(m.extra, "rule", rule)
	return m, nil
}

func mapError(h *hook) (mapped, error) {
	var d errorData
	if err := unmarshalData(h, &d); err != nil {
		return mapped{}, err
	}
	ev := d.Error
	if ev == nil {
		return mapped{}, errors.New("data.error missing")
	}
	var b strings.Builder
	b.WriteString("Sentry error")
	if ev.IssueID != "" {
		fmt.Fprintf(&b, " in issue %s", ev.IssueID)
	}
	b.WriteString(" " + cmp.Or(h.Action, "created") + ": " + cmp.Or(ev.Title, ev.Message, ev.EventID))
	b.WriteString(details(ev.Level, "", ev.Culprit))
	return eventMapped(ev, b.String()), nil
}

// eventMapped is the envelope of an event (an alert's or an error's) that
// content describes.
func eventMapped(ev *event, content string) mapped {
	return mapped{
		role: envelope.RoleUser, content: content, objectID: cmp.Or(ev.EventID, string(ev.IssueID)),
		issueID: string(ev.IssueID), url: ev.WebURL, extra: eventExtra(ev), facts: eventFacts(ev),
	}
}

// eventFacts are the facts of an event: its issue, level, culprit and title
// (an event names its project by id only, so project is left out).
func eventFacts(ev *event) mappers.Facts {
	var fx mappers.Facts
	fx.Str("issue_id", string(ev.IssueID))
	fx.Str("level", ev.Level)
	fx.Str("culprit", ev.Culprit)
	fx.Str("title", cmp.Or(ev.Title, ev.Message))
	return fx
}

func eventExtra(ev *event) map[string]any {
	extra := map[string]any{}
	setIf(extra, "issue_id", string(ev.IssueID))
	setIf(extra, "event_id", ev.EventID)
	setIf(extra, "level", ev.Level)
	setIf(extra, "title", ev.Title)
	setIf(extra, "api_url", ev.URL)
	setIf(extra, "issue_url", ev.IssueURL)
	setIf(extra, "project_id", string(ev.Project))
	return extra
}

func mapMetricAlert(h *hook) (mapped, error) {
	var d metricAlertData
	if err := unmarshalData(h, &d); err != nil {
		return mapped{}, err
	}
	ma := d.MetricAlert
	if ma == nil || ma.ID == "" {
		return mapped{}, errors.New("data.metric_alert.id missing")
	}
	rule := cmp.Or(ma.AlertRule.Name, ma.Title)
	var b strings.Builder
	fmt.Fprintf(&b, "Sentry metric alert '%s' is %s", rule, cmp.Or(h.Action, "changed"))
	if t := cmp.Or(d.DescriptionTitle, ma.Title); t != "" {
		b.WriteString(": " + t)
	}
	if d.DescriptionText != "" {
		b.WriteString(" — " + d.DescriptionText)
	}
	extra := map[string]any{"incident_id": string(ma.ID)}
	setIf(extra, "incident_identifier", string(ma.Identifier))
	setIf(extra, "alert_rule", rule)
	setIf(extra, "alert_rule_id", string(ma.AlertRule.ID))
	if len(ma.Projects) > 0 {
		ps := make([]any, len(ma.Projects))
		for i, s := range ma.Projects {
			ps[i] = trim(s)
		}
		extra["projects"] = ps
	}
	return mapped{
		role: envelope.RoleUser, content: b.String(), objectID: string(ma.ID),
		issueID: "incident-" + string(ma.ID), url: d.WebURL, extra: extra,
	}, nil
}

func mapComment(h *hook, actor string) (mapped, error) {
	var d commentData
	if err := unmarshalData(h, &d); err != nil {
		return mapped{}, err
	}
	if d.IssueID == "" {
		return mapped{}, errors.New("data.issue_id missing")
	}
	verb := map[string]string{"created": "commented on", "updated": "edited a comment on", "deleted": "deleted a comment on"}[h.Action]
	if verb == "" {
		verb = h.Action + " a comment on"
	}
	who := cmp.Or(actor, "someone")
	content := fmt.Sprintf("%s %s Sentry issue %s", who, verb, d.IssueID)
	if d.ProjectSlug != "" {
		content += " in project " + d.ProjectSlug
	}
	if d.Comment != nil && *d.Comment != "" {
		content += ": " + *d.Comment
	}
	extra := map[string]any{"issue_id": string(d.IssueID)}
	setIf(extra, "comment_id", string(d.CommentID))
	setIf(extra, "project", d.ProjectSlug)
	setIf(extra, "comment_timestamp", d.Timestamp)
	var fx mappers.Facts
	fx.Str("issue_id", string(d.IssueID))
	fx.Str("project", d.ProjectSlug)
	return mapped{
		role: envelope.RoleUser, content: content, objectID: cmp.Or(string(d.CommentID), string(d.IssueID)),
		issueID: string(d.IssueID), extra: extra, facts: fx,
	}, nil
}

func mapInstallation(h *hook, actor string) (mapped, error) {
	var d installationData
	if err := unmarshalData(h, &d); err != nil {
		return mapped{}, err
	}
	in := d.Installation
	if in == nil {
		return mapped{}, errors.New("data.installation missing")
	}
	verb := map[string]string{"created": "installed", "deleted": "uninstalled"}[h.Action]
	if verb == "" {
		verb = h.Action
	}
	content := fmt.Sprintf("%s %s the Sentry integration %s", cmp.Or(actor, "someone"), verb, cmp.Or(in.App.Slug, in.App.UUID))
	if in.Organization.Slug != "" {
		content += " in organization " + in.Organization.Slug
	}
	if in.Status != "" {
		content += " (status " + in.Status + ")"
	}
	extra := map[string]any{}
	setIf(extra, "installation_uuid", in.UUID)
	setIf(extra, "installation_status", in.Status)
	setIf(extra, "organization", in.Organization.Slug)
	setIf(extra, "app", in.App.Slug)
	setIf(extra, "app_uuid", in.App.UUID)
	return mapped{
		role: envelope.RoleSystem, content: content, objectID: cmp.Or(in.UUID, h.Installation.UUID), extra: extra,
	}, nil
}

// mapGeneric maps a resource this package does not know: who did what, and the
// issue thread when data names an issue.
func mapGeneric(resource string, h *hook, actor string) mapped {
	var d struct {
		IssueID id `json:"issue_id"`
		Issue   *struct {
			ID id `json:"id"`
		} `json:"issue"`
		WebURL string `json:"web_url"`
	}
	_ = unmarshalData(h, &d) // best effort: any shape is accepted
	issue := string(d.IssueID)
	if issue == "" && d.Issue != nil {
		issue = string(d.Issue.ID)
	}
	content := fmt.Sprintf("Sentry %s %s", resource, cmp.Or(h.Action, "event"))
	if actor != "" {
		content += " by " + actor
	}
	if issue != "" {
		content += " for issue " + issue
	}
	extra := map[string]any{}
	setIf(extra, "issue_id", issue)
	return mapped{role: envelope.RoleUser, content: content, objectID: issue, issueID: issue, url: d.WebURL, extra: extra}
}

func unmarshalData(h *hook, v any) error {
	d := bytes.TrimSpace(h.Data)
	if len(d) == 0 || string(d) == "null" {
		return errors.New("no data object")
	}
	if err := json.Unmarshal(d, v); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	return nil
}

func details(level, status, culprit string) string {
	var parts []string
	if level != "" {
		parts = append(parts, "level "+level)
	}
	if status != "" {
		parts = append(parts, "status "+status)
	}
	if culprit != "" {
		parts = append(parts, "culprit "+culprit)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func status(s, sub string) string {
	if sub != "" && s != "" {
		return s + "/" + sub
	}
	return s
}

func parseErr(err error) error { return &mappers.ParseError{Provider: Name, Err: err} }

func trim(s string) string { return clip.To(s, mappers.MaxContent) }

func setIf(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}
