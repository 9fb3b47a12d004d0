package sentry

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	"github.com/relaystation/relay/mappers"
)

// Sentry's webhook headers.
const (
	HeaderSignature = "Sentry-Hook-Signature"
	HeaderResource  = "Sentry-Hook-Resource"
	HeaderTimestamp = "Sentry-Hook-Timestamp"
	HeaderRequestID = "Request-ID"
)

// Verify checks Sentry-Hook-Signature: hex HMAC-SHA256(client secret, raw
// body), no prefix, compared in constant time. It returns mappers.ErrNoSecret
// without a client secret and a *mappers.SignatureError for a missing or wrong
// signature.
func (p *Provider) Verify(r *mappers.Request) error {
	if !p.cfg.Secret.IsSet() {
		return mappers.ErrNoSecret
	}
	sig := r.Header.Get(HeaderSignature)
	if sig == "" {
		return sigErr("missing " + HeaderSignature)
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return sigErr("signature is not a hex SHA-256 digest")
	}
	if !hmac.Equal(got, Sign(p.cfg.Secret.Reveal(), r.Body)) {
		return sigErr("signature mismatch")
	}
	return nil
}

// Sign returns HMAC-SHA256(secret, body); the header value is its hex form
// (SignatureHeader). Tests and load generators use it.
func Sign(secret string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return m.Sum(nil)
}

// SignatureHeader returns the Sentry-Hook-Signature value for body.
func SignatureHeader(secret string, body []byte) string {
	return hex.EncodeToString(Sign(secret, body))
}

func sigErr(reason string) error {
	return &mappers.SignatureError{Provider: Name, Reason: reason}
}
