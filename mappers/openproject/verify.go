package openproject

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"

	"github.com/relaystation/relay/mappers"
)

// HeaderSignature carries "sha1=" + hex HMAC-SHA1(secret, body).
const HeaderSignature = "X-OP-Signature"

// Verify checks X-OP-Signature: "sha1=" + hex HMAC-SHA1(webhook secret, raw
// body), compared in constant time. OpenProject signs only with SHA-1. It
// returns mappers.ErrNoSecret without a secret and a *mappers.SignatureError
// for a missing or wrong signature.
func (p *Provider) Verify(r *mappers.Request) error {
	if !p.cfg.Secret.IsSet() {
		return mappers.ErrNoSecret
	}
	sig := r.Header.Get(HeaderSignature)
	if sig == "" {
		return sigErr("missing " + HeaderSignature)
	}
	hexSig, ok := strings.CutPrefix(sig, "sha1=")
	if !ok {
		return sigErr("signature is not sha1=")
	}
	if reason := mappers.CheckHexHMAC(sha1.New, "SHA-1", p.cfg.Secret.Reveal(), r.Body, hexSig); reason != "" {
		return sigErr(reason)
	}
	return nil
}

// Sign returns HMAC-SHA1(secret, body). Tests and load generators use it.
func Sign(secret string, body []byte) []byte {
	return mappers.HMAC(sha1.New, secret, body)
}

// SignatureHeader returns the X-OP-Signature value for body.
func SignatureHeader(secret string, body []byte) string {
	return "sha1=" + hex.EncodeToString(Sign(secret, body))
}

func sigErr(reason string) error {
	return &mappers.SignatureError{Provider: Name, Reason: reason}
}
