package mappers

import (
	"crypto/hmac"
	"encoding/hex"
	"hash"
	"strings"
	"sync"

	"github.com/relaystation/relay/secret"
)

// HMAC returns the HMAC of body under secret with the hash h.
func HMAC(h func() hash.Hash, secret string, body []byte) []byte {
	m := hmac.New(h, []byte(secret))
	m.Write(body)
	return m.Sum(nil)
}

// HMACPool checks HMACs under one key with keyed hashes it reuses:
// hmac.New allocates and hashes the key's two padded blocks every time, a
// pooled hash only resets to the state after them. It is safe for
// concurrent use.
type HMACPool struct {
	pool sync.Pool // of *pooledHMAC
}

type pooledHMAC struct {
	h   hash.Hash
	sum []byte // room for one digest
}

// NewHMACPool returns a pool of HMACs with the hash h under key. key must not
// change afterwards.
func NewHMACPool(h func() hash.Hash, key []byte) *HMACPool {
	return &HMACPool{pool: sync.Pool{New: func() any {
		m := hmac.New(h, key)
		return &pooledHMAC{h: m, sum: make([]byte, 0, m.Size())}
	}}}
}

// Equal reports whether mac is the HMAC of body, in constant time.
func (p *HMACPool) Equal(body, mac []byte) bool {
	m := p.pool.Get().(*pooledHMAC)
	m.h.Write(body)
	ok := hmac.Equal(mac, m.h.Sum(m.sum[:0]))
	m.h.Reset()
	p.pool.Put(m)
	return ok
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

// HexHMAC is a webhook signature scheme: Prefix and the hex HMAC of the raw
// body under the webhook secret, in one header (Sentry, OpenProject).
type HexHMAC struct {
	// Provider names the provider in SignatureErrors.
	Provider string
	// Header carries the signature.
	Header string
	// Prefix stands before the hex digest ("sha1="); may be empty.
	Prefix string
	// Hash is the HMAC's hash, Name its name in reasons ("SHA-256").
	Hash func() hash.Hash
	Name string
}

// Verify checks r's signature under secret, in constant time. It returns
// ErrNoSecret when secret is unset and a *SignatureError for a missing or
// wrong signature.
func (s HexHMAC) Verify(r *Request, secret secret.Value) error {
	if !secret.IsSet() {
		return ErrNoSecret
	}
	sig := r.Header.Get(s.Header)
	if sig == "" {
		return s.fail("missing " + s.Header)
	}
	hexSig, ok := strings.CutPrefix(sig, s.Prefix)
	if !ok {
		return s.fail("signature is not " + s.Prefix)
	}
	if reason := CheckHexHMAC(s.Hash, s.Name, secret.Reveal(), r.Body, hexSig); reason != "" {
		return s.fail(reason)
	}
	return nil
}

// Sign returns the HMAC of body under secret.
func (s HexHMAC) Sign(secret string, body []byte) []byte { return HMAC(s.Hash, secret, body) }

// Value returns the header value that signs body under secret.
func (s HexHMAC) Value(secret string, body []byte) string {
	return s.Prefix + hex.EncodeToString(s.Sign(secret, body))
}

func (s HexHMAC) fail(reason string) error {
	return &SignatureError{Provider: s.Provider, Reason: reason}
}
