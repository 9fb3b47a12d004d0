package sentry

// Outbound: comments on Sentry issues through the Sentry web API, posted
// effectively once per idempotency key.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/secret"
)

// DefaultAPIURL is the Sentry web API of sentry.io.
const DefaultAPIURL = "https://sentry.io"

// CommenterConfig configures a Commenter.
type CommenterConfig struct {
	// Token is an auth token with event:write (SENTRY_TOKEN). Required.
	Token secret.Value
	// APIURL is the Sentry instance (SENTRY_API_URL), default DefaultAPIURL;
	// the API lives under {APIURL}/api/0/.
	APIURL string
	// HTTPClient sends the requests; default a client with a 30s timeout.
	HTTPClient *http.Client
	// Logger; nil discards.
	Logger *slog.Logger
}

// ErrNoToken is returned by NewCommenter without a token.
var ErrNoToken = errors.New("sentry: no auth token (SENTRY_TOKEN)")

// Commenter adds comments (notes) to Sentry issues:
// POST {APIURL}/api/0/issues/{issue_id}/comments/ with {"text": ...}. Every
// comment carries a hidden marker <!-- relay:{key} --> and the issue's recent
// comments are searched for it first, so one key comments once. Safe for
// concurrent use.
type Commenter struct {
	base string
	api  *mappers.JSONAPI
	log  *slog.Logger
}

// NewCommenter returns a Commenter.
func NewCommenter(cfg CommenterConfig) (*Commenter, error) {
	if !cfg.Token.IsSet() {
		return nil, ErrNoToken
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	base, err := mappers.BaseURL("sentry", "API URL", cfg.APIURL)
	if err != nil {
		return nil, err
	}
	token := cfg.Token
	api := &mappers.JSONAPI{
		Provider:  "sentry",
		Client:    mappers.ClientOr(cfg.HTTPClient),
		Authorize: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token.Reveal()) },
		Message:   detail,
	}
	return &Commenter{base: base, api: api, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))}, nil
}

// Comment is a created (or found) issue comment.
type Comment struct {
	// ID is Sentry's activity id of the comment.
	ID string
	// Existing is true when the comment was found by its marker and nothing
	// was created.
	Existing bool
}

type note struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		Text string `json:"text"`
	} `json:"data"`
}

// PostComment comments text on issue issueID once for key: when a recent
// comment carries the key's marker it is returned with Existing set. Errors
// are *PostError.
func (c *Commenter) PostComment(ctx context.Context, issueID, text, key string) (Comment, error) {
	find := func(key string) (*Comment, error) { return c.FindComment(ctx, issueID, key) }
	return mappers.PostOnce(key, text, find, func(text string) (Comment, error) {
		body, _ := json.Marshal(map[string]string{"text": text})
		var n note
		if err := c.api.Do(ctx, http.MethodPost, c.notesURL(issueID), body, &n); err != nil {
			if mappers.AnswerLost(err) {
				c.log.Warn("comment created but the answer did not decode", "issue", issueID, "err", err)
				return Comment{}, nil
			}
			return Comment{}, err
		}
		return Comment{ID: n.ID}, nil
	})
}

// FindComment returns the comment with key's marker among the issue's most
// recent comments (the first page, newest first), or nil.
func (c *Commenter) FindComment(ctx context.Context, issueID, key string) (*Comment, error) {
	var notes []note
	if err := c.api.Do(ctx, http.MethodGet, c.notesURL(issueID), nil, &notes); err != nil {
		return nil, err
	}
	marker := mappers.Marker(key)
	for _, n := range notes {
		if strings.Contains(n.Data.Text, marker) {
			return &Comment{ID: n.ID, Existing: true}, nil
		}
	}
	return nil, nil
}

func (c *Commenter) notesURL(issueID string) string {
	return c.base + "/api/0/issues/" + url.PathEscape(issueID) + "/comments/"
}

// detail is Sentry's {"detail": "..."} message, or the start of the body.
func detail(b []byte) string {
	var d struct {
		Detail any `json:"detail"`
	}
	if json.Unmarshal(b, &d) == nil && d.Detail != nil {
		return fmt.Sprint(d.Detail)
	}
	return mappers.BodyText(b)
}

// PostError is a failed Sentry API call.
type PostError = mappers.APIError
