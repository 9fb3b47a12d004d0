package sentry

import (
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
	if reason := mappers.CheckHexHMAC(sha256.New, "SHA-256", p.cfg.Secret.Reveal(), r.Body, sig); reason != "" {
		return sigErr(reason)
	}
	return nil
}

// Sign returns HMAC-SHA256(secret, body); the header value is its hex form
// (SignatureHeader). Tests and load generators use it.
func Sign(secret string, body []byte) []byte {
	return mappers.HMAC(sha256.New, secret, body)
}

// SignatureHeader returns the Sentry-Hook-Signature value for body.
func SignatureHeader(secret string, body []byte) string {
	return hex.EncodeToString(Sign(secret, body))
}

func sigErr(reason string) error {
	return &mappers.SignatureError{Provider: Name, Reason: reason}
}
