package github

// Outbound: issue and pull-request comments through the REST API, posted
// effectively once per idempotency key.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	gh "github.com/google/go-github/v60/github"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/secret"
)

// CommenterConfig configures a Commenter.
type CommenterConfig struct {
	// Token is a token allowed to comment (GITHUB_TOKEN). Required.
	Token secret.Value
	// APIURL is the REST API root (GITHUB_API_URL): default
	// "https://api.github.com/"; GitHub Enterprise Server is
	// "https://{host}/api/v3/". Tests point it at a local server.
	APIURL string
	// HTTPClient sends the requests; default a client with a 30s timeout.
	HTTPClient *http.Client
	// MaxScanPages bounds how many pages of 100 comments the marker check
	// reads. Default 10.
	MaxScanPages int
	// Logger; nil discards.
	Logger *slog.Logger
}

// ErrNoToken is returned by NewCommenter without a token.
var ErrNoToken = errors.New("github: no token (GITHUB_TOKEN)")

// Commenter creates issue and pull-request comments with go-github, at most
// once per idempotency key: every comment carries a hidden marker
// <!-- relay:{key} --> and, before creating one, the issue's comments since a
// given time are searched for the marker. It is safe for concurrent use.
type Commenter struct {
	client   *gh.Client
	maxPages int
	log      *slog.Logger
}

// NewCommenter returns a Commenter.
func NewCommenter(cfg CommenterConfig) (*Commenter, error) {
	if !cfg.Token.IsSet() {
		return nil, ErrNoToken
	}
	if cfg.MaxScanPages <= 0 {
		cfg.MaxScanPages = 10
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := gh.NewClient(mappers.ClientOr(cfg.HTTPClient)).WithAuthToken(cfg.Token.Reveal())
	if cfg.APIURL != "" {
		u, err := url.Parse(cfg.APIURL)
		if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("github: API URL %q is not an absolute http(s) URL", cfg.APIURL)
		}
		if !strings.HasSuffix(u.Path, "/") {
			u.Path += "/"
		}
		c.BaseURL = u
	}
	return &Commenter{client: c, maxPages: cfg.MaxScanPages, log: cfg.Logger}, nil
}

// Client is the underlying go-github client.
func (c *Commenter) Client() *gh.Client { return c.client }

// Comment is a created (or found) issue comment.
type Comment struct {
	// ID is GitHub's comment id.
	ID int64
	// URL is the comment's html_url.
	URL string
	// Existing is true when the comment was already there (found by its
	// marker) and nothing was created.
	Existing bool
}

// PostComment comments body on issue or pull request owner/repo#number, once
// for key: when a comment with the key's marker exists among the comments
// updated since since (zero: all), it is returned with Existing set and
// nothing is created. Give since a time safely before the first attempt (the
// envelope's timestamp minus a margin). Errors are *PostError.
func (c *Commenter) PostComment(ctx context.Context, owner, repo string, number int, body, key string, since time.Time) (Comment, error) {
	find := func(key string) (*Comment, error) { return c.FindComment(ctx, owner, repo, number, key, since) }
	return mappers.PostOnce(key, body, find, func(body string) (Comment, error) {
		cm, resp, err := c.client.Issues.CreateComment(ctx, owner, repo, number, &gh.IssueComment{Body: gh.String(body)})
		if err != nil {
			return Comment{}, classify(fmt.Sprintf("create comment on %s/%s#%d", owner, repo, number), resp, err)
		}
		return Comment{ID: cm.GetID(), URL: cm.GetHTMLURL()}, nil
	})
}

// FindComment returns the comment carrying key's marker among the comments
// of owner/repo#number updated since since, or nil.
func (c *Commenter) FindComment(ctx context.Context, owner, repo string, number int, key string, since time.Time) (*Comment, error) {
	marker := mappers.Marker(key)
	opts := &gh.IssueListCommentsOptions{ListOptions: gh.ListOptions{PerPage: 100}}
	if !since.IsZero() {
		opts.Since = &since
	}
	for page := 0; page < c.maxPages; page++ {
		list, resp, err := c.client.Issues.ListComments(ctx, owner, repo, number, opts)
		if err != nil {
			return nil, classify(fmt.Sprintf("list comments of %s/%s#%d", owner, repo, number), resp, err)
		}
		for _, cm := range list {
			if strings.Contains(cm.GetBody(), marker) {
				return &Comment{ID: cm.GetID(), URL: cm.GetHTMLURL(), Existing: true}, nil
			}
		}
		if resp.NextPage == 0 {
			return nil, nil
		}
		opts.Page = resp.NextPage
	}
	c.log.Warn("marker check stopped at the page limit; a duplicate comment is possible",
		"issue", fmt.Sprintf("%s/%s#%d", owner, repo, number), "pages", c.maxPages)
	return nil, nil
}

// PostError is a failed GitHub API call.
type PostError struct {
	// Op says what was attempted, with the issue.
	Op string
	// Status is GitHub's HTTP status; 0 when there was no answer.
	Status int
	// RetryAfter is when to try again after a rate limit (Retry-After, or the
	// primary rate limit's reset).
	RetryAfter time.Duration
	// Err is go-github's error.
	Err error
}

func (e *PostError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("github %s: %d %s", e.Op, e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("github %s: %v", e.Op, e.Err)
}

func (e *PostError) Unwrap() error { return e.Err }

// Permanent reports whether retrying cannot help: a 4xx other than rate
// limits (403/429 with rate-limit headers), 408 and 409.
func (e *PostError) Permanent() bool {
	var rl *gh.RateLimitError
	var ab *gh.AbuseRateLimitError
	switch {
	case errors.As(e.Err, &rl), errors.As(e.Err, &ab):
		return false
	}
	return mappers.PermanentStatus(e.Status)
}

// RetryDelay is how long GitHub asked to wait, or 0.
func (e *PostError) RetryDelay() time.Duration { return e.RetryAfter }

func classify(op string, resp *gh.Response, err error) error {
	pe := &PostError{Op: op, Err: err}
	if resp != nil && resp.Response != nil {
		pe.Status = resp.StatusCode
	}
	var rl *gh.RateLimitError
	var ab *gh.AbuseRateLimitError
	var er *gh.ErrorResponse
	switch {
	case errors.As(err, &rl):
		if rl.Response != nil {
			pe.Status = rl.Response.StatusCode
		}
		if d := time.Until(rl.Rate.Reset.Time); d > 0 {
			pe.RetryAfter = d + time.Second
		}
	case errors.As(err, &ab):
		if ab.Response != nil {
			pe.Status = ab.Response.StatusCode
		}
		if ab.RetryAfter != nil {
			pe.RetryAfter = *ab.RetryAfter
		}
	case errors.As(err, &er) && er.Response != nil:
		pe.Status = er.Response.StatusCode
		pe.RetryAfter, _ = mappers.RetryAfter(er.Response.Header, time.Now())
	}
	return pe
}
