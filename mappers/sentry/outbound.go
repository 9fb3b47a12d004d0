package sentry

// Outbound: comments on Sentry issues through the Sentry web API, posted
// effectively once per idempotency key.

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
	base   string
	token  secret.Value
	client *http.Client
	log    *slog.Logger
}

// NewCommenter returns a Commenter.
func NewCommenter(cfg CommenterConfig) (*Commenter, error) {
	if !cfg.Token.IsSet() {
		return nil, ErrNoToken
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	u, err := url.Parse(cfg.APIURL)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("sentry: API URL %q is not an absolute http(s) URL", cfg.APIURL)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Commenter{base: strings.TrimSuffix(cfg.APIURL, "/"), token: cfg.Token, client: cfg.HTTPClient, log: cfg.Logger}, nil
}

// Comment is a created (or found) issue comment.
type Comment struct {
	// ID is Sentry's activity id of the comment.
	ID string
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
	if key != "" {
		found, err := c.FindComment(ctx, issueID, key)
		if err != nil || found != nil {
			if found != nil {
				return *found, nil
			}
			return Comment{}, err
		}
		text = strings.TrimRight(text, "\n") + "\n\n" + Marker(key)
	}
	body, _ := json.Marshal(map[string]string{"text": text})
	var n note
	if err := c.do(ctx, http.MethodPost, c.notesURL(issueID), body, &n); err != nil {
		var pe *PostError
		if errors.As(err, &pe) && pe.Status >= 200 && pe.Status < 300 {
			c.log.Warn("comment created but the answer did not decode", "issue", issueID, "err", err)
			return Comment{}, nil
		}
		return Comment{}, err
	}
	return Comment{ID: n.ID}, nil
}

// FindComment returns the comment with key's marker among the issue's most
// recent comments (the first page, newest first), or nil.
func (c *Commenter) FindComment(ctx context.Context, issueID, key string) (*Comment, error) {
	var notes []note
	if err := c.do(ctx, http.MethodGet, c.notesURL(issueID), nil, &notes); err != nil {
		return nil, err
	}
	marker := Marker(key)
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

func (c *Commenter) do(ctx context.Context, method, u string, body []byte, out any) error {
	op := method + " " + u
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return &PostError{Op: op, Err: err, Status: http.StatusBadRequest}
	}
	req.Header.Set("Authorization", "Bearer "+c.token.Reveal())
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return &PostError{Op: op, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return &PostError{Op: op, Err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &PostError{Op: op, Status: resp.StatusCode, Detail: detail(data), RetryAfter: retryAfter(resp.Header.Get("Retry-After"))}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return &PostError{Op: op, Status: resp.StatusCode, Err: fmt.Errorf("decode answer: %w", err)}
		}
	}
	return nil
}

// detail is Sentry's {"detail": "..."} message, or the start of the body.
func detail(b []byte) string {
	var d struct {
		Detail any `json:"detail"`
	}
	if json.Unmarshal(b, &d) == nil && d.Detail != nil {
		return fmt.Sprint(d.Detail)
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// PostError is a failed Sentry API call.
type PostError struct {
	// Op is the method and URL.
	Op string
	// Status is Sentry's HTTP status; 0 when there was no answer.
	Status int
	// Detail is Sentry's error message.
	Detail string
	// RetryAfter is Sentry's Retry-After on a rate limit.
	RetryAfter time.Duration
	// Err is the transport or decoding error.
	Err error
}

func (e *PostError) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("sentry %s: %v", e.Op, e.Err)
	case e.Detail != "":
		return fmt.Sprintf("sentry %s: %d %s: %s", e.Op, e.Status, http.StatusText(e.Status), e.Detail)
	}
	return fmt.Sprintf("sentry %s: %d %s", e.Op, e.Status, http.StatusText(e.Status))
}

func (e *PostError) Unwrap() error { return e.Err }

// Permanent reports whether retrying cannot help: a 4xx other than 408 and 429.
func (e *PostError) Permanent() bool {
	switch {
	case e.Status == 0, e.Status >= 500, e.Status < 300, e.Status == http.StatusTooManyRequests, e.Status == http.StatusRequestTimeout:
		return false
	}
	return e.Status >= 300
}

// RetryDelay is Sentry's Retry-After, or 0.
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
