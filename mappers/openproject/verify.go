package openproject

import (
	"crypto/sha1"

	"github.com/relaystation/relay/mappers"
)

// HeaderSignature carries "sha1=" + hex HMAC-SHA1(secret, body).
const HeaderSignature = "X-OP-Signature"

// signature is OpenProject's scheme: "sha1=" + hex HMAC-SHA1(secret, body).
var signature = mappers.HexHMAC{Provider: Name, Header: HeaderSignature, Prefix: "sha1=", Hash: sha1.New, Name: "SHA-1"}

// Verify checks X-OP-Signature: "sha1=" + hex HMAC-SHA1(webhook secret, raw
// body), compared in constant time. OpenProject signs only with SHA-1. It
// returns mappers.ErrNoSecret without a secret and a *mappers.SignatureError
// for a missing or wrong signature.
func (p *Provider) Verify(r *mappers.Request) error {
	return signature.Verify(r, p.cfg.Secret)
}

// Sign returns HMAC-SHA1(secret, body). Tests and load generators use it.
func Sign(secret string, body []byte) []byte {
	return signature.Sign(secret, body)
}

// SignatureHeader returns the X-OP-Signature value for body.
func SignatureHeader(secret string, body []byte) string {
	return signature.Value(secret, body)
}
