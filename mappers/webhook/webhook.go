// Package webhook signs, sends and verifies generic webhooks in the Standard
// Webhooks format (https://www.standardwebhooks.com): every request carries
//
//	webhook-id:        the message id, the receiver's idempotency key
//	webhook-timestamp: Unix seconds
//	webhook-signature: "v1," + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))
//
// where key is the base64-decoded part of a "whsec_..." secret. Several
// space-separated signatures may be sent (secret rotation); a verifier accepts
// the request when any one of them matches.
//
// A Sender posts a body to a URL with those headers and classifies the answer:
// 2xx is delivered; 429 (with Retry-After), 408, 425 and 5xx and network errors
// are worth retrying; any other status is permanent. Redirects are not
// followed. A Verifier is the receiving side, used by tests and by anyone
// receiving the relay's webhooks in Go.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/mappers"
)

// Header names of the Standard Webhooks specification.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts a Standard Webhooks secret: "whsec_" + base64(key).
const SecretPrefix = "whsec_"

// Secret is a signing key. It prints and logs as REDACTED. The zero Secret is
// unset and signs nothing.
type Secret struct{ key []byte }

// ErrBadSecret is returned by ParseSecret for a secret that is not
// "whsec_" + base64 (or plain base64) of at least 16 bytes.
var ErrBadSecret = errors.New("webhook secret: want whsec_ followed by the base64 of at least 16 random bytes (24 to 64 recommended)")

// ParseSecret reads a "whsec_<base64>" secret. The prefix is optional.
func ParseSecret(s string) (Secret, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), SecretPrefix)
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil || len(key) < 16 {
		return Secret{}, ErrBadSecret
	}
	return Secret{key: key}, nil
}

// GenerateSecret returns a new random secret in "whsec_" form, for operators
// setting up a receiver.
func GenerateSecret() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return SecretPrefix + base64.StdEncoding.EncodeToString(k)
}

// IsSet reports whether the secret holds a key.
func (s Secret) IsSet() bool { return len(s.key) > 0 }

// String returns REDACTED, never the key.
func (s Secret) String() string {
	if !s.IsSet() {
		return ""
	}
	return "REDACTED"
}

// LogValue makes slog print REDACTED.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Sign returns the "v1,<base64>" signature of body sent with id at ts.
func (s Secret) Sign(id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(s.mac(id, strconv.FormatInt(ts.Unix(), 10), body))
}

func (s Secret) mac(id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// SetHeaders writes the three Standard Webhooks headers for body into h.
func (s Secret) SetHeaders(h http.Header, id string, ts time.Time, body []byte) {
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, s.Sign(id, ts, body))
}

// Verification failures. Verify wraps one of them.
var (
	// ErrMissingHeaders: webhook-id, webhook-timestamp or webhook-signature is absent.
	ErrMissingHeaders = errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrTimestamp: the timestamp is not a number or is outside the tolerance.
	ErrTimestamp = errors.New("webhook timestamp outside the tolerance")
	// ErrSignature: no v1 signature matches.
	ErrSignature = errors.New("no matching webhook signature")
)

// DefaultTolerance is how far a timestamp may be from the verifier's clock.
const DefaultTolerance = 5 * time.Minute

// Verifier checks Standard Webhooks signatures. Several secrets may be given
// (rotation); a request signed with any of them verifies. Safe for concurrent use.
type Verifier struct {
	// Secrets that may have signed the request.
	Secrets []Secret
	// Tolerance on the timestamp; default DefaultTolerance.
	Tolerance time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Verify checks the headers and body of a received webhook. The error wraps
// ErrMissingHeaders, ErrTimestamp or ErrSignature.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	id, tsRaw, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || tsRaw == "" || sigs == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook %s: timestamp %q: %w", id, tsRaw, ErrTimestamp)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	if d := now().Sub(time.Unix(ts, 0)); d > tol || d < -tol {
		return fmt.Errorf("webhook %s: timestamp %d is %s from now: %w", id, ts, d.Round(time.Second), ErrTimestamp)
	}
	for _, sig := range strings.Fields(sigs) {
		ver, b64, ok := strings.Cut(sig, ",")
		if !ok || ver != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		for _, s := range v.Secrets {
			if s.IsSet() && hmac.Equal(got, s.mac(id, tsRaw, body)) {
				return nil
			}
		}
	}
	return fmt.Errorf("webhook %s: %w", id, ErrSignature)
}

// Payload is the body shape the specification recommends:
// {"type": "...", "timestamp": "...", "data": {...}}.
type Payload struct {
	// Type names the event, for example "relay.message".
	Type string `json:"type"`
	// Timestamp is when the event happened.
	Timestamp time.Time `json:"timestamp"`
	// Data is the event itself.
	Data any `json:"data"`
}

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Secret signs every request. Required.
	Secret Secret
	// Client sends the requests; default a client with Timeout. Its redirect
	// policy is replaced: redirects are never followed.
	Client *http.Client
	// Timeout bounds one request when ctx has no deadline. Default 15s.
	Timeout time.Duration
	// UserAgent is sent with every request. Default "relay-webhook/1".
	UserAgent string
	// Now is the clock for webhook-timestamp; default time.Now.
	Now func() time.Time
}

// ErrNoSecret is returned by NewSender without a secret.
var ErrNoSecret = errors.New("webhook sender: no signing secret (RELAY_WEBHOOK_SECRET)")

// Sender posts signed webhooks. Safe for concurrent use.
type Sender struct {
	cfg SenderConfig
}

// NewSender returns a Sender.
func NewSender(cfg SenderConfig) (*Sender, error) {
	if !cfg.Secret.IsSet() {
		return nil, ErrNoSecret
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 15 * time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "relay-webhook/1"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &http.Client{Timeout: cfg.Timeout}
	if cfg.Client != nil {
		cp := *cfg.Client
		c = &cp
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg.Client = c
	return &Sender{cfg: cfg}, nil
}

// Delivery is a receiver's acceptance of a webhook.
type Delivery struct {
	// Status is the receiver's 2xx status.
	Status int
}

// Send posts body (JSON) to url with webhook-id id. Sending the same id again
// lets the receiver recognise a repeat. The error is a *SendError.
func (s *Sender) Send(ctx context.Context, url, id string, body []byte) (Delivery, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
	op := "POST " + url
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Delivery{}, &SendError{Op: op, Err: err, permanent: true}
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return Delivery{}, &SendError{Op: op, Err: fmt.Errorf("scheme %q is not http or https", req.URL.Scheme), permanent: true}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	s.cfg.Secret.SetHeaders(req.Header, id, s.cfg.Now(), body)
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return Delivery{}, &SendError{Op: op, Err: err}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return Delivery{Status: resp.StatusCode}, nil
	}
	se := &SendError{Op: op, Status: resp.StatusCode, Body: strings.TrimSpace(string(snippet))}
	se.RetryAfter, _ = mappers.RetryAfter(resp.Header, s.cfg.Now())
	return Delivery{}, se
}

// SendError is a failed delivery: a network error (Status 0) or a non-2xx answer.
type SendError struct {
	// Op is "POST {url}".
	Op string
	// Status is the receiver's HTTP status; 0 when there was no answer.
	Status int
	// Body is the start of the receiver's answer.
	Body string
	// RetryAfter is the receiver's Retry-After, when it sent one.
	RetryAfter time.Duration
	// Err is the transport error, when there was no answer.
	Err error

	permanent bool
}

func (e *SendError) Error() string {
	return mappers.FailureText(e.Op, e.Status, clip.To(e.Body, 200), e.Err)
}

func (e *SendError) Unwrap() error { return e.Err }

// Permanent reports whether retrying cannot help (mappers.PermanentStatus: a
// 3xx, as redirects are not followed, or a 4xx other than 408, 409, 425 and
// 429), or a request that cannot be built.
func (e *SendError) Permanent() bool {
	if e.permanent {
		return true
	}
	return mappers.PermanentStatus(e.Status)
}

// RetryDelay is the receiver's Retry-After, or 0.
func (e *SendError) RetryDelay() time.Duration { return e.RetryAfter }
