package openproject

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/secret"
)

// Name is the provider's route name.
const Name = "openproject"

// MetaKey is the meta extra key under which OpenProject details are kept.
const MetaKey = "openproject"

// DefaultHost is the thread-key host when neither Config.BaseURL nor an
// absolute link names one.
const DefaultHost = "openproject"

// Config configures the OpenProject provider.
type Config struct {
	// Secret is the webhook secret (OPENPROJECT_WEBHOOK_SECRET). Unset means
	// every request is refused.
	Secret secret.Value
	// BaseURL is the OpenProject instance (OPENPROJECT_URL), for example
	// https://openproject.example.com. It names the host in thread keys and
	// makes the html URLs in meta.source.
	BaseURL string
	// Now is the clock, used when a request carries no Received time; nil means
	// time.Now.
	Now func() time.Time
}

// Provider verifies and maps OpenProject webhooks. It implements
// mappers.Provider and is safe for concurrent use.
type Provider struct {
	cfg  Config
	base string // BaseURL without a trailing slash, "" when unset or invalid
	host string // host of BaseURL
}

var _ mappers.Provider = (*Provider)(nil)

// Validate reports a BaseURL that is not an absolute http(s) URL. Call it at
// startup; New ignores an invalid BaseURL (threads then fall back to the
// links' host or DefaultHost).
func (c Config) Validate() error {
	if c.BaseURL == "" {
		return nil
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("openproject base URL %q: want an absolute http(s) URL", c.BaseURL)
	}
	return nil
}

// New returns an OpenProject provider.
func New(cfg Config) *Provider {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Provider{cfg: cfg}
	if cfg.Validate() == nil && cfg.BaseURL != "" {
		u, _ := url.Parse(cfg.BaseURL)
		p.base = strings.TrimRight(cfg.BaseURL, "/")
		p.host = u.Host
	}
	return p
}

// Name returns "openproject".
func (p *Provider) Name() string { return Name }

// id is an API v3 id, a number (or, defensively, a string).
type id = mappers.ID

// text is a Formattable ({"format","raw","html"}) or a plain string.
type text string

func (t *text) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, (*string)(t))
	}
	if len(b) > 0 && b[0] == '{' {
		var f struct {
			Raw string `json:"raw"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return err
		}
		*t = text(f.Raw)
		return nil
	}
	*t = "" // null, or an unexpected shape: no text; the rest still maps
	return nil
}

type link struct {
	Href  string `json:"href"`
	Title string `json:"title"`
}

// resource is the union of the API v3 resources a webhook carries.
type resource struct {
	Type        string                     `json:"_type"`
	ID          id                         `json:"id"`
	LockVersion *json.Number               `json:"lockVersion"`
	Subject     string                     `json:"subject"`
	Name        string                     `json:"name"`
	Identifier  string                     `json:"identifier"`
	FileName    string                     `json:"fileName"`
	FileSize    *json.Number               `json:"fileSize"`
	ContentType string                     `json:"contentType"`
	Hours       string                     `json:"hours"`
	SpentOn     string                     `json:"spentOn"`
	Description text                       `json:"description"`
	Comment     text                       `json:"comment"`
	CreatedAt   string                     `json:"createdAt"`
	UpdatedAt   string                     `json:"updatedAt"`
	Links       map[string]json.RawMessage `json:"_links"`
	Embedded    map[string]json.RawMessage `json:"_embedded"`
}

// link returns the named _links entry when it is a single link.
func (r *resource) link(name string) link {
	var l link
	if raw := r.Links[name]; len(raw) > 0 && raw[0] == '{' {
		_ = json.Unmarshal(raw, &l) // a malformed link is treated as absent
	}
	return l
}

// embedded decodes the named _embedded entry into v, reporting success.
func (r *resource) embedded(name string, v any) bool {
	raw := r.Embedded[name]
	return len(raw) > 0 && raw[0] == '{' && json.Unmarshal(raw, v) == nil
}

// person is the name of the user behind a link, preferring the embedded user.
func (r *resource) person(name string) string {
	var u struct {
		Name string `json:"name"`
	}
	if r.embedded(name, &u) && u.Name != "" {
		return u.Name
	}
	return r.link(name).Title
}

// payloadKey maps an action's event to the key of its resource.
var payloadKey = map[string]string{
	"work_package":         "work_package",
	"work_package_comment": "activity",
	"project":              "project",
	"time_entry":           "time_entry",
	"attachment":           "attachment",
}

// Map turns a verified OpenProject webhook into one envelope.
func (p *Provider) Map(r *mappers.Request) (mappers.Result, error) {
	var body map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return mappers.Result{}, parseErr(mappers.CheckContentType(r, mappers.JSON, fmt.Errorf("body: %w", err)))
	}
	var action string
	if raw, ok := body["action"]; !ok || json.Unmarshal(raw, &action) != nil || action == "" {
		return mappers.Result{}, parseErr(errors.New("body without an action"))
	}
	event, verb, _ := strings.Cut(action, ":")
	key := payloadKey[event]
	if key == "" {
		key = resourceKey(body)
	}
	raw := bytes.TrimSpace(body[key])
	if key == "" || len(raw) == 0 || raw[0] != '{' {
		return mappers.Result{}, parseErr(fmt.Errorf("%s: no resource object", action))
	}
	var res resource
	if err := json.Unmarshal(raw, &res); err != nil {
		return mappers.Result{}, parseErr(fmt.Errorf("%s: %s: %w", action, key, err))
	}

	m := p.describe(event, verb, key, &res)
	msgID := p.msgID(action, key, &res, r.Body)

	e := envelope.New(envelope.ChannelOpenProject, envelope.RoleUser, mappers.Clip(m.content, mappers.MaxContent))
	e.Meta.Budget = &envelope.Budget{Tokens: envelope.EstimateTokens(e.Content)}
	at := r.Received
	if at.IsZero() {
		at = p.cfg.Now()
	}
	e.Timestamp = at.UTC().Truncate(time.Microsecond)
	host := p.threadHost(&res)
	if m.wp > 0 {
		e.Meta.Thread = envelope.OpenProjectThread(host, m.wp)
	}
	e.Meta.Source = &envelope.Source{
		Event:      trim(event),
		Action:     trim(verb),
		DeliveryID: trim(msgID),
		URL:        trim(m.url),
		Actor:      trim(m.actor),
	}
	extra := map[string]any{"action": trim(action), "host": trim(host)}
	setIf(extra, "resource", res.Type)
	setIf(extra, "id", string(res.ID))
	setIf(extra, "api_href", res.link("self").Href)
	if m.wp > 0 {
		extra["work_package_id"] = m.wp
	}
	setIf(extra, "work_package_subject", m.wpSubject)
	if res.LockVersion != nil {
		extra["lock_version"] = res.LockVersion.String()
	}
	setIf(extra, "project", res.link("project").Title)
	setIf(extra, "status", res.link("status").Title)
	setIf(extra, "type", res.link("type").Title)
	setIf(extra, "assignee", res.link("assignee").Title)
	setIf(extra, "priority", res.link("priority").Title)
	e.Meta.Set(MetaKey, mappers.TrimStrings(extra, mappers.MaxContent))
	var fx mappers.Facts
	fx.Int("work_package_id", m.wp)
	fx.Str("title", m.wpSubject)
	fx.Str("project", res.link("project").Title)
	fx.Str("type", res.link("type").Title)
	fx.Str("status", res.link("status").Title)
	fx.Str("priority", res.link("priority").Title)
	fx.Str("assignee", res.link("assignee").Title)
	fx.SetOn(e)
	return mappers.One(envelope.Inbound(envelope.ChannelOpenProject, event), msgID, e), nil
}

// resourceKey finds the resource of an unknown action: the first key (in
// sorted order) other than "action" whose value is an object.
func resourceKey(body map[string]json.RawMessage) string {
	keys := make([]string, 0, len(body))
	for k, v := range body {
		if v = bytes.TrimSpace(v); k != "action" && len(v) > 0 && v[0] == '{' {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

type described struct {
	content, actor, url string
	wp                  int
	wpSubject           string
}

// describers build the content of the resource kinds OpenProject sends, by
// the resource's key in the payload; other kinds are described generically.
var describers = map[string]func(p *Provider, d *described, verb string, r *resource){
	"work_package": (*Provider).describeWorkPackage,
	"activity":     (*Provider).describeActivity,
	"project":      (*Provider).describeProject,
	"time_entry":   (*Provider).describeTimeEntry,
	"attachment":   (*Provider).describeAttachment,
}

// describe says what happened to the resource under key: the content, the
// actor, the web URL and the work package it concerns.
func (p *Provider) describe(event, verb, key string, r *resource) described {
	var d described
	if fill, ok := describers[key]; ok {
		fill(p, &d, verb, r)
		return d
	}
	d.wp = workPackageID(r.link("workPackage").Href)
	title := cmp.Or(r.Subject, r.Name, r.FileName, r.link("self").Title)
	s := "OpenProject " + event + " " + cmp.Or(verb, "event")
	if r.ID != "" {
		s += " #" + string(r.ID)
	}
	if title != "" {
		s += " '" + title + "'"
	}
	d.content = withText(s, firstNonEmptyText(r.Comment, r.Description))
	return d
}

// wpRef names the work package of d: "work package #12 'subject'".
func (d *described) wpRef() string {
	s := "work package #" + strconv.Itoa(d.wp)
	if d.wpSubject != "" {
		s += " '" + d.wpSubject + "'"
	}
	return s
}

// withText appends the trimmed text t to s after a colon, when there is one.
func withText(s string, t text) string {
	if t = text(strings.TrimSpace(string(t))); t != "" {
		return s + ": " + string(t)
	}
	return s
}

func (p *Provider) describeWorkPackage(d *described, verb string, r *resource) {
	d.wp = positive(string(r.ID))
	d.wpSubject = r.Subject
	d.url = p.webURL("/work_packages/%d", d.wp)
	facts := nonEmpty(r.link("type").Title, r.link("status").Title)
	if a := r.link("assignee").Title; a != "" {
		facts = append(facts, "assignee "+a)
	}
	var s string
	if verb == "created" {
		d.actor = r.person("author")
		s = cmp.Or(d.actor, "someone") + " created " + d.wpRef()
	} else {
		s = d.wpRef() + " was " + pastTense(verb)
	}
	if len(facts) > 0 {
		s += " (" + strings.Join(facts, ", ") + ")"
	}
	if pr := r.link("project").Title; pr != "" {
		s += " in project " + pr
	}
	d.content = withText(s, r.Description)
}

func (p *Provider) describeActivity(d *described, _ string, r *resource) {
	d.wp = workPackageID(r.link("workPackage").Href)
	var wp struct {
		ID      id     `json:"id"`
		Subject string `json:"subject"`
	}
	if r.embedded("workPackage", &wp) {
		if d.wp == 0 {
			d.wp = positive(string(wp.ID))
		}
		d.wpSubject = wp.Subject
	}
	d.wpSubject = cmp.Or(r.link("workPackage").Title, d.wpSubject)
	d.actor = r.person("user")
	d.url = p.webURL("/work_packages/%d/activity", d.wp)
	target := "a work package"
	if d.wp > 0 {
		target = d.wpRef()
	}
	d.content = withText(cmp.Or(d.actor, "someone")+" commented on "+target, r.Comment)
}

func (p *Provider) describeProject(d *described, verb string, r *resource) {
	d.url = p.webURL("/projects/%s", r.Identifier)
	s := "project '" + cmp.Or(r.Name, r.Identifier, string(r.ID)) + "'"
	if r.Identifier != "" && r.Identifier != r.Name {
		s += " (" + r.Identifier + ")"
	}
	d.content = withText(s+" was "+pastTense(verb), r.Description)
}

func (p *Provider) describeTimeEntry(d *described, verb string, r *resource) {
	d.wp = workPackageID(cmp.Or(r.link("workPackage").Href, r.link("entity").Href))
	d.wpSubject = cmp.Or(r.link("workPackage").Title, r.link("entity").Title)
	d.actor = r.person("user")
	d.url = p.webURL("/work_packages/%d", d.wp)
	s := cmp.Or(d.actor, "someone") + " logged " + cmp.Or(r.Hours, "time")
	if verb != "created" {
		s = "time entry #" + string(r.ID) + " was " + pastTense(verb) + ": " + s
	}
	if d.wp > 0 {
		s += " on " + d.wpRef()
	} else if pr := r.link("project").Title; pr != "" {
		s += " in project " + pr
	}
	if r.SpentOn != "" {
		s += " for " + r.SpentOn
	}
	if a := r.link("activity").Title; a != "" {
		s += " (" + a + ")"
	}
	d.content = withText(s, r.Comment)
}

func (p *Provider) describeAttachment(d *described, _ string, r *resource) {
	d.wp = workPackageID(r.link("container").Href)
	if d.wp > 0 {
		d.wpSubject = r.link("container").Title
	}
	d.actor = r.person("author")
	d.url = p.webURL("/work_packages/%d", d.wp)
	s := cmp.Or(d.actor, "someone") + " attached " + cmp.Or(r.FileName, "a file")
	facts := nonEmpty(r.ContentType)
	if r.FileSize != nil {
		facts = append(facts, r.FileSize.String()+" bytes")
	}
	if len(facts) > 0 {
		s += " (" + strings.Join(facts, ", ") + ")"
	}
	if d.wp > 0 {
		s += " to " + d.wpRef()
	} else if c := r.link("container").Title; c != "" {
		s += " to " + c
	}
	d.content = withText(s, r.Description)
}

func (p *Provider) msgID(action, key string, r *resource, raw []byte) string {
	prefix := "openproject:" + action + ":"
	if r.ID != "" {
		base := prefix + key + ":" + string(r.ID)
		switch key {
		case "work_package":
			if r.LockVersion != nil {
				return base + ":v" + r.LockVersion.String()
			}
			if r.UpdatedAt != "" {
				return base + ":" + r.UpdatedAt
			}
		case "activity", "attachment":
			return base
		case "project", "time_entry":
			if v := cmp.Or(r.UpdatedAt, r.CreatedAt); v != "" {
				return base + ":" + v
			}
		}
	}
	sum := sha256.Sum256(raw)
	return prefix + "sha256:" + hex.EncodeToString(sum[:])
}

// threadHost is the host part of thread keys (see the package doc).
func (p *Provider) threadHost(r *resource) string {
	if p.host != "" {
		return p.host
	}
	if u, err := url.Parse(r.link("self").Href); err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https") {
		return u.Host
	}
	return DefaultHost
}

// webURL is BaseURL + the formatted path, or "" when BaseURL is unset or the
// object is unknown.
func (p *Provider) webURL(format string, arg any) string {
	if p.base == "" {
		return ""
	}
	switch a := arg.(type) {
	case int:
		if a <= 0 {
			return ""
		}
	case string:
		if a == "" {
			return ""
		}
		arg = url.PathEscape(a)
	}
	return p.base + fmt.Sprintf(format, arg)
}

// workPackageID reads the id from a ".../work_packages/{id}" href, or 0.
func workPackageID(href string) int {
	const seg = "/work_packages/"
	i := strings.LastIndex(href, seg)
	if i < 0 {
		return 0
	}
	rest := href[i+len(seg):]
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		rest = rest[:j]
	}
	return positive(rest)
}

// positive parses a positive decimal int, or returns 0.
func positive(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// pastTense is the verb of an action as written after "was": OpenProject's
// verbs (created, updated) already are.
func pastTense(verb string) string {
	if verb == "" {
		return "changed"
	}
	return verb
}

func nonEmpty(ss ...string) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func firstNonEmptyText(ts ...text) text {
	for _, t := range ts {
		if t != "" {
			return t
		}
	}
	return ""
}

func parseErr(err error) error { return &mappers.ParseError{Provider: Name, Err: err} }

func trim(s string) string { return clip.To(s, mappers.MaxContent) }

func setIf(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}
