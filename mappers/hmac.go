package mappers

import (
	"crypto/hmac"
	"encoding/hex"
	"hash"
)

// HMAC returns the HMAC of body under secret with the hash h.
func HMAC(h func() hash.Hash, secret string, body []byte) []byte {
	m := hmac.New(h, []byte(secret))
	m.Write(body)
	return m.Sum(nil)
}

// CheckHexHMAC compares hexSig, a hex digest, with the HMAC of body under
// secret (hash h, named name in reasons: "SHA-256"), in constant time. It
// returns "" when they match, else the reason for a SignatureError.
func CheckHexHMAC(h func() hash.Hash, name, secret string, body []byte, hexSig string) (reason string) {
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != h().Size() {
		return "signature is not a hex " + name + " digest"
	}
	if !hmac.Equal(got, HMAC(h, secret, body)) {
		return "signature mismatch"
	}
	return ""
}
