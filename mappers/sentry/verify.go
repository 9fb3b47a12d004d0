package sentry

import (
	"crypto/sha256"

	"github.com/relaystation/relay/mappers"
)

// Sentry's webhook headers.
const (
	HeaderSignature = "Sentry-Hook-Signature"
	HeaderResource  = "Sentry-Hook-Resource"
	HeaderTimestamp = "Sentry-Hook-Timestamp"
	HeaderRequestID = "Request-ID"
)

// signature is Sentry's scheme: hex HMAC-SHA256(client secret, body), no prefix.
var signature = mappers.HexHMAC{Provider: Name, Header: HeaderSignature, Hash: sha256.New, Name: "SHA-256"}

// Verify checks Sentry-Hook-Signature: hex HMAC-SHA256(client secret, raw
// body), no prefix, compared in constant time. It returns mappers.ErrNoSecret
// without a client secret and a *mappers.SignatureError for a missing or wrong
// signature.
func (p *Provider) Verify(r *mappers.Request) error {
	return signature.Verify(r, p.cfg.Secret)
}

// Sign returns HMAC-SHA256(secret, body); the header value is its hex form
// (SignatureHeader). Tests and load generators use it.
func Sign(secret string, body []byte) []byte {
	return signature.Sign(secret, body)
}

// SignatureHeader returns the Sentry-Hook-Signature value for body.
func SignatureHeader(secret string, body []byte) string {
	return signature.Value(secret, body)
}
