package mappers

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/relaystation/relay/internal/clip"
)

// PermanentStatus reports whether an HTTP status means retrying cannot help:
// 3xx and 4xx except 408 Request Timeout, 409 Conflict (a concurrent update),
// 425 Too Early and 429 Too Many Requests. 0 (no answer) and 5xx are transient.
func PermanentStatus(code int) bool {
	switch {
	case code == 0, code >= 500:
		return false
	case code == http.StatusRequestTimeout, code == http.StatusConflict,
		code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		return false
	}
	return code >= 300
}

// MaxRetryAfter caps what RetryAfter reads.
const MaxRetryAfter = 24 * time.Hour

// RetryAfter reads how long a server asks to wait before the next request:
// the Retry-After-Ms header (OpenAI's, milliseconds) or Retry-After (delay
// seconds, fractions accepted, or an HTTP date, counted from now), capped at
// MaxRetryAfter. ok is false when neither header is present and readable; a
// date in the past reads as 0 with ok true. It is the relay's one Retry-After
// parser: the provider clients and the LLM client use it.
func RetryAfter(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if d, ok := delay(h.Get("Retry-After-Ms"), time.Millisecond); ok {
		return d, true
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if d, ok := delay(v, time.Second); ok || v == "" {
		return d, ok
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), MaxRetryAfter), true
	}
	return 0, false
}

// delay reads a non-negative number of units, capped at MaxRetryAfter.
func delay(v string, unit time.Duration) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(f >= 0) { // NaN too
		return 0, false
	}
	return time.Duration(min(f, float64(MaxRetryAfter/unit)) * float64(unit)), true
}

// APIError is a failed call to a provider's HTTP API.
type APIError struct {
	// Provider names the API ("sentry", "openproject").
	Provider string
	// Op is the method and URL.
	Op string
	// Status is the HTTP status; 0 when there was no answer.
	Status int
	// Message is the provider's error text.
	Message string
	// RetryAfter is the provider's Retry-After, when it sent one.
	RetryAfter time.Duration
	// Err is the transport or decoding error.
	Err error
	// invalid marks a request that could not be built.
	invalid bool
}

func (e *APIError) Error() string {
	return FailureText(e.Provider+" "+e.Op, e.Status, e.Message, e.Err)
}

// FailureText describes a failed HTTP call op: "{op}: {err}" when err is
// set, else "{op}: {status} {status text}", followed by ": {detail}" when
// detail is not empty. *APIError and the webhook sender's errors read so.
func FailureText(op string, status int, detail string, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %v", op, err)
	case detail != "":
		return fmt.Sprintf("%s: %d %s: %s", op, status, http.StatusText(status), detail)
	}
	return fmt.Sprintf("%s: %d %s", op, status, http.StatusText(status))
}

func (e *APIError) Unwrap() error { return e.Err }

// Permanent reports whether retrying cannot help (see PermanentStatus); a
// request that could not be built is permanent, a lost answer is not.
func (e *APIError) Permanent() bool {
	if e.invalid {
		return true
	}
	if e.Status >= 200 && e.Status < 300 {
		return false // the call worked; only its answer did not decode
	}
	return PermanentStatus(e.Status)
}

// RetryDelay is the provider's Retry-After, or 0.
func (e *APIError) RetryDelay() time.Duration { return e.RetryAfter }

// JSONAPI calls a provider's JSON HTTP API. It is safe for concurrent use.
type JSONAPI struct {
	// Provider names the API in errors.
	Provider string
	// Client does the requests.
	Client *http.Client
	// Authorize sets the request's credentials.
	Authorize func(*http.Request)
	// Accept is the Accept header; default application/json.
	Accept string
	// MaxBody bounds the answer read; default 8 MiB.
	MaxBody int64
	// Message extracts the provider's error text from an error answer;
	// default the start of the body.
	Message func(body []byte) string
}

// Do sends body (JSON, may be nil) with method to u and decodes a 2xx answer
// into out (when not nil). Every error is an *APIError.
func (a *JSONAPI) Do(ctx context.Context, method, u string, body []byte, out any) error {
	op := method + " " + u
	fail := func(e *APIError) error { e.Provider, e.Op = a.Provider, op; return e }
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fail(&APIError{Err: err, invalid: true})
	}
	if a.Authorize != nil {
		a.Authorize(req)
	}
	req.Header.Set("Accept", cmp.Or(a.Accept, "application/json"))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return fail(&APIError{Err: err})
	}
	defer resp.Body.Close()
	limit := a.MaxBody
	if limit <= 0 {
		limit = 8 << 20
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return fail(&APIError{Err: err})
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := BodyText(data)
		if a.Message != nil {
			msg = a.Message(data)
		}
		ae := &APIError{Status: resp.StatusCode, Message: msg}
		ae.RetryAfter, _ = RetryAfter(resp.Header, time.Now())
		return fail(ae)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fail(&APIError{Status: resp.StatusCode, Err: fmt.Errorf("decode answer: %w", err)})
		}
	}
	return nil
}

// BodyText is the start of an answer body, for error messages.
func BodyText(b []byte) string {
	return clip.To(strings.TrimSpace(string(b)), 200)
}

var safeKey = regexp.MustCompile(`^[A-Za-z0-9:._/@+=-]{1,200}$`)

// Marker returns the hidden HTML comment that identifies the comment an
// outbound formatter posted for an idempotency key, so a retry can find it on
// the provider before posting again. A key with characters outside
// [A-Za-z0-9:._/@+=-] (or "--", which would end the HTML comment) is replaced
// by its SHA-256.
func Marker(key string) string {
	if !safeKey.MatchString(key) || strings.Contains(key, "--") {
		sum := sha256.Sum256([]byte(key))
		key = "sha256:" + hex.EncodeToString(sum[:])
	}
	return MarkerPrefix + key + " -->"
}

// MarkerPrefix starts every Marker.
const MarkerPrefix = "<!-- relay:"

// WithMarker is text with the key's marker appended on its own paragraph.
func WithMarker(text, key string) string {
	return strings.TrimRight(text, "\n") + "\n\n" + Marker(key)
}

// PostOnce posts text at most once for key, the way the comment clients do:
// find looks on the provider for a post carrying the key's marker and, when
// it finds one, PostOnce returns it without posting; otherwise post posts the
// text with the marker appended (WithMarker). Without a key, post posts text
// as it is and nothing is looked up.
func PostOnce[P any](key, text string, find func(key string) (*P, error), post func(text string) (P, error)) (P, error) {
	if key != "" {
		found, err := find(key)
		if err != nil {
			var none P
			return none, err
		}
		if found != nil {
			return *found, nil
		}
		text = WithMarker(text, key)
	}
	return post(text)
}

// maxMarker bounds a marker Clip keeps (a hashed key makes one of 84 bytes).
const maxMarker = 200

// Clip bounds inbound text to n bytes as clip.To does, but keeps a marker
// of the relay's (Marker) that the cut would drop: a long comment the relay
// posted comes back in its webhook still known as the relay's own (the
// agent and the hooks skip content with the marker).
func Clip(text string, n int) string {
	out := clip.To(text, n)
	if len(out) == len(text) || strings.Contains(out, MarkerPrefix) {
		return out
	}
	i := strings.LastIndex(text, MarkerPrefix)
	if i < 0 {
		return out
	}
	end := strings.Index(text[i:], "-->")
	if end < 0 || end+3 > maxMarker {
		return out
	}
	return out + "\n\n" + text[i:i+end+3]
}
