// Package github is the GitHub webhook provider of the gateway: it verifies
// X-Hub-Signature-256 on the raw body (go-github ValidatePayload semantics,
// sha256 only) and maps every event type into one envelope on
// in.github.{event}, typed through go-github's ParseWebHook where the event is
// known to it and generically from the JSON otherwise.
//
// Thread keys: every event about one issue, pull request or discussion carries
// envelope.GitHubThread(owner, repo, number); check runs, check suites and
// workflow runs attached to a pull request join that pull request's thread.
// Events about a repository alone carry "github:{owner}/{repo}", events about
// an organization alone "github:{org}".
//
// Delivery identity: the Nats-Msg-Id is "github:{X-GitHub-Hook-ID}:{X-GitHub-Delivery}";
// GitHub's redeliveries reuse the delivery GUID, so a redelivery stores nothing new.
//
// A Provider is pure (no I/O) and safe for concurrent use.
package github

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/secret"
)

// Header names GitHub sends with every webhook.
const (
	HeaderSignature256  = "X-Hub-Signature-256"
	HeaderSignatureSHA1 = "X-Hub-Signature"
	HeaderEvent         = "X-GitHub-Event"
	HeaderDelivery      = "X-GitHub-Delivery"
	HeaderHookID        = "X-GitHub-Hook-ID"
)

// Name is the provider's route name: /webhooks/github.
const Name = "github"

// Config configures the GitHub provider.
type Config struct {
	// Secret is the webhook secret (GITHUB_WEBHOOK_SECRET). Unset, every request
	// is refused with mappers.ErrNoSecret.
	Secret secret.Value
	// MaxContent bounds the bodies (issue text, comments) copied into an
	// envelope's content, in bytes. Default mappers.MaxContent.
	MaxContent int
}

// Provider verifies and maps GitHub webhooks. It implements mappers.Provider.
type Provider struct {
	key        []byte
	macs       *mappers.HMACPool // HMAC-SHA256 under key
	maxContent int
}

var _ mappers.Provider = (*Provider)(nil)

// New returns a GitHub provider.
func New(cfg Config) *Provider {
	p := &Provider{maxContent: cfg.MaxContent}
	if cfg.Secret.IsSet() {
		p.key = []byte(cfg.Secret.Reveal())
		p.macs = mappers.NewHMACPool(sha256.New, p.key)
	}
	if p.maxContent <= 0 {
		p.maxContent = mappers.MaxContent
	}
	return p
}

// Name returns "github".
func (p *Provider) Name() string { return Name }

// Verify checks X-Hub-Signature-256 ("sha256=" + hex HMAC-SHA256(secret, body))
// against the raw body in constant time. A request signed only with SHA-1
// (X-Hub-Signature) is refused. It returns mappers.ErrNoSecret when no secret
// is configured and a *mappers.SignatureError otherwise.
func (p *Provider) Verify(r *mappers.Request) error {
	if len(p.key) == 0 {
		return mappers.ErrNoSecret
	}
	got, err := parseSignature(r.Header.Get(HeaderSignature256), r.Header.Get(HeaderSignatureSHA1))
	if err != nil {
		return err
	}
	if !p.macs.Equal(r.Body, got[:]) {
		return mismatch()
	}
	return nil
}

// VerifySignature checks sig256, the X-Hub-Signature-256 value, against body
// and key. sha1 is the X-Hub-Signature value, used only to explain why a
// request without sig256 is refused. It is exported for tools that sign and
// check payloads outside the gateway.
func VerifySignature(key []byte, sig256, sha1 string, body []byte) error {
	got, err := parseSignature(sig256, sha1)
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	if !hmac.Equal(got[:], mac.Sum(nil)) {
		return mismatch()
	}
	return nil
}

// mismatch is the error of a signature of the right form that does not match
// the body.
func mismatch() error {
	return &mappers.SignatureError{Provider: Name, Reason: "X-Hub-Signature-256 does not match the body"}
}

// parseSignature returns the MAC of sig256, the X-Hub-Signature-256 value,
// or the *mappers.SignatureError saying why there is none (see
// VerifySignature).
func parseSignature(sig256, sha1 string) (got [sha256.Size]byte, err error) {
	if sig256 == "" {
		if sha1 != "" {
			return got, &mappers.SignatureError{Provider: Name, Reason: "only an SHA-1 X-Hub-Signature was sent; X-Hub-Signature-256 is required"}
		}
		return got, &mappers.SignatureError{Provider: Name, Reason: "missing X-Hub-Signature-256"}
	}
	algo, hexMAC, ok := strings.Cut(sig256, "=")
	if !ok || algo != "sha256" {
		return got, &mappers.SignatureError{Provider: Name, Reason: "X-Hub-Signature-256 is not sha256=<hex>"}
	}
	if len(hexMAC) != 2*sha256.Size {
		return got, &mappers.SignatureError{Provider: Name, Reason: "X-Hub-Signature-256 has the wrong length"}
	}
	var digits [2 * sha256.Size]byte // copied, not converted: no allocation
	copy(digits[:], hexMAC)
	if _, err := hex.Decode(got[:], digits[:]); err != nil {
		return got, &mappers.SignatureError{Provider: Name, Reason: "X-Hub-Signature-256 is not hex"}
	}
	return got, nil
}

// Sign returns the X-Hub-Signature-256 value of body under key, as GitHub
// computes it. Tests and load generators use it.
func Sign(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// SetHeaders sets on h the headers GitHub sends with a webhook: the event,
// the delivery id, the hook id and, when sig is not empty, the
// X-Hub-Signature-256 value sig (see Sign). Tests and load generators use it.
func SetHeaders(h http.Header, event, delivery, hookID, sig string) {
	h.Set(HeaderEvent, event)
	h.Set(HeaderDelivery, delivery)
	h.Set(HeaderHookID, hookID)
	if sig != "" {
		h.Set(HeaderSignature256, sig)
	}
}
