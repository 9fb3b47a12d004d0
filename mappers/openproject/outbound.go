package openproject

// Outbound: comments on work packages through API v3, posted effectively once
// per idempotency key.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/secret"
)

// CommenterConfig configures a Commenter.
type CommenterConfig struct {
	// BaseURL is the OpenProject instance (OPENPROJECT_URL), for example
	// https://openproject.example.com. Required.
	BaseURL string
	// Token is an API key (OPENPROJECT_TOKEN), sent as basic auth
	// "apikey:{token}". Required.
	Token secret.Value
	// Notify asks OpenProject to notify watchers of the comment. Default false.
	Notify bool
	// HTTPClient sends the requests; default a client with a 30s timeout.
	HTTPClient *http.Client
	// Logger; nil discards.
	Logger *slog.Logger
}

// Configuration errors of NewCommenter.
var (
	ErrNoToken   = errors.New("openproject: no API token (OPENPROJECT_TOKEN)")
	ErrNoBaseURL = errors.New("openproject: no instance URL (OPENPROJECT_URL)")
)

// Commenter comments on work packages with API v3:
// POST {BaseURL}/api/v3/work_packages/{id}/activities with
// {"comment": {"raw": markdown}}. Every comment carries a hidden marker
// <!-- relay:{key} --> and the work package's activities are searched for it
// first, so one key comments once. Safe for concurrent use.
type Commenter struct {
	base   string
	api    *mappers.JSONAPI
	notify bool
	log    *slog.Logger
}

// NewCommenter returns a Commenter.
func NewCommenter(cfg CommenterConfig) (*Commenter, error) {
	if cfg.BaseURL == "" {
		return nil, ErrNoBaseURL
	}
	if !cfg.Token.IsSet() {
		return nil, ErrNoToken
	}
	base, err := mappers.BaseURL("openproject", "URL", cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	token := cfg.Token
	api := &mappers.JSONAPI{
		Provider:  "openproject",
		Client:    mappers.ClientOr(cfg.HTTPClient),
		Authorize: func(r *http.Request) { r.SetBasicAuth("apikey", token.Reveal()) },
		Accept:    "application/hal+json",
		MaxBody:   16 << 20,
		Message:   message,
	}
	return &Commenter{base: base, api: api, notify: cfg.Notify, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))}, nil
}

// Comment is a created (or found) work package comment.
type Comment struct {
	// ID is the activity id.
	ID int
	// URL is the activity's API href.
	URL string
	// Existing is true when the comment was found by its marker and nothing
	// was created.
	Existing bool
}

// activity is the HAL shape of a work package activity.
type activity struct {
	ID      int `json:"id"`
	Comment struct {
		Raw string `json:"raw"`
	} `json:"comment"`
	Links struct {
		Self struct {
			Href string `json:"href"`
		} `json:"self"`
	} `json:"_links"`
}

// PostComment comments markdown on work package id once for key: when an
// activity carries the key's marker it is returned with Existing set. Errors
// are *PostError.
func (c *Commenter) PostComment(ctx context.Context, id int, markdown, key string) (Comment, error) {
	find := func(key string) (*Comment, error) { return c.FindComment(ctx, id, key) }
	return mappers.PostOnce(key, markdown, find, func(markdown string) (Comment, error) {
		body, _ := json.Marshal(map[string]any{"comment": map[string]string{"raw": markdown}})
		var a activity
		u := c.activitiesURL(id) + "?notify=" + strconv.FormatBool(c.notify)
		if err := c.api.Do(ctx, http.MethodPost, u, body, &a); err != nil {
			if mappers.AnswerLost(err) {
				c.log.Warn("comment created but the answer did not decode", "work_package", id, "err", err)
				return Comment{}, nil
			}
			return Comment{}, err
		}
		return Comment{ID: a.ID, URL: a.Links.Self.Href}, nil
	})
}

// FindComment returns the activity of work package id carrying key's marker, or nil.
func (c *Commenter) FindComment(ctx context.Context, id int, key string) (*Comment, error) {
	var coll struct {
		Embedded struct {
			Elements []activity `json:"elements"`
		} `json:"_embedded"`
	}
	if err := c.api.Do(ctx, http.MethodGet, c.activitiesURL(id), nil, &coll); err != nil {
		return nil, err
	}
	marker := mappers.Marker(key)
	for _, a := range coll.Embedded.Elements {
		if strings.Contains(a.Comment.Raw, marker) {
			return &Comment{ID: a.ID, URL: a.Links.Self.Href, Existing: true}, nil
		}
	}
	return nil, nil
}

func (c *Commenter) activitiesURL(id int) string {
	return c.base + "/api/v3/work_packages/" + strconv.Itoa(id) + "/activities"
}

// message reads the HAL error {"_type": "Error", "message": "..."}.
func message(b []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		return e.Message
	}
	return mappers.BodyText(b)
}

// PostError is a failed OpenProject API call.
type PostError = mappers.APIError
