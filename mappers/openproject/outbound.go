package openproject

// Outbound: comments on work packages through API v3, posted effectively once
// per idempotency key.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

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
	token  secret.Value
	notify bool
	client *http.Client
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
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("openproject: URL %q is not an absolute http(s) URL", cfg.BaseURL)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Commenter{base: strings.TrimSuffix(cfg.BaseURL, "/"), token: cfg.Token, notify: cfg.Notify, client: cfg.HTTPClient, log: cfg.Logger}, nil
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

var safeKey = regexp.MustCompile(`^[A-Za-z0-9:._/@+=-]{1,200}$`)

// Marker returns the hidden HTML comment that identifies the comment of an
// idempotency key (a key with other characters, or "--", is hashed).
func Marker(key string) string {
	if !safeKey.MatchString(key) || strings.Contains(key, "--") {
		sum := sha256.Sum256([]byte(key))
		key = "sha256:" + hex.EncodeToString(sum[:])
	}
	return "<!-- relay:" + key + " -->"
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
	if key != "" {
		found, err := c.FindComment(ctx, id, key)
		if err != nil {
			return Comment{}, err
		}
		if found != nil {
			return *found, nil
		}
		markdown = strings.TrimRight(markdown, "\n") + "\n\n" + Marker(key)
	}
	body, _ := json.Marshal(map[string]any{"comment": map[string]string{"raw": markdown}})
	var a activity
	u := c.activitiesURL(id) + "?notify=" + strconv.FormatBool(c.notify)
	if err := c.do(ctx, http.MethodPost, u, body, &a); err != nil {
		var pe *PostError
		if errors.As(err, &pe) && pe.Status >= 200 && pe.Status < 300 {
			c.log.Warn("comment created but the answer did not decode", "work_package", id, "err", err)
			return Comment{}, nil
		}
		return Comment{}, err
	}
	return Comment{ID: a.ID, URL: a.Links.Self.Href}, nil
}

// FindComment returns the activity of work package id carrying key's marker, or nil.
func (c *Commenter) FindComment(ctx context.Context, id int, key string) (*Comment, error) {
	var coll struct {
		Embedded struct {
			Elements []activity `json:"elements"`
		} `json:"_embedded"`
	}
	if err := c.do(ctx, http.MethodGet, c.activitiesURL(id), nil, &coll); err != nil {
		return nil, err
	}
	marker := Marker(key)
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

func (c *Commenter) do(ctx context.Context, method, u string, body []byte, out any) error {
	op := method + " " + u
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return &PostError{Op: op, Err: err, Status: http.StatusBadRequest}
	}
	req.SetBasicAuth("apikey", c.token.Reveal())
	req.Header.Set("Accept", "application/hal+json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return &PostError{Op: op, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return &PostError{Op: op, Err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &PostError{Op: op, Status: resp.StatusCode, Message: message(data), RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return &PostError{Op: op, Status: resp.StatusCode, Err: fmt.Errorf("decode answer: %w", err)}
		}
	}
	return nil
}

// message reads the HAL error {"_type": "Error", "message": "..."}.
func message(b []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		return e.Message
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// PostError is a failed OpenProject API call.
type PostError struct {
	// Op is the method and URL.
	Op string
	// Status is OpenProject's HTTP status; 0 when there was no answer.
	Status int
	// Message is OpenProject's error message.
	Message string
	// RetryAfter is the Retry-After on a rate limit.
	RetryAfter time.Duration
	// Err is the transport or decoding error.
	Err error
}

func (e *PostError) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("openproject %s: %v", e.Op, e.Err)
	case e.Message != "":
		return fmt.Sprintf("openproject %s: %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), e.Message)
	}
	return fmt.Sprintf("openproject %s: %d %s", e.Op, e.Status, http.StatusText(e.Status))
}

func (e *PostError) Unwrap() error { return e.Err }

// Permanent reports whether retrying cannot help: a 3xx or 4xx other than 408,
// 409 (a concurrent update) and 429.
func (e *PostError) Permanent() bool {
	switch {
	case e.Status == 0, e.Status >= 500, e.Status < 300,
		e.Status == http.StatusTooManyRequests, e.Status == http.StatusRequestTimeout, e.Status == http.StatusConflict:
		return false
	}
	return true
}

// RetryDelay is the Retry-After, or 0.
func (e *PostError) RetryDelay() time.Duration { return e.RetryAfter }

func retryAfter(v string) time.Duration {
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
		return time.Duration(min(n, 86400)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && time.Until(t) > 0 {
		return min(time.Until(t), 24*time.Hour)
	}
	return 0
}
