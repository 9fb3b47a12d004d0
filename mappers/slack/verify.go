package slack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/relaystation/relay/mappers"
)

// Slack's signature headers.
const (
	HeaderSignature = "X-Slack-Signature"
	HeaderTimestamp = "X-Slack-Request-Timestamp"
)

// DefaultMaxSkew is how far X-Slack-Request-Timestamp may be from the time the
// request was received before it is refused as a possible replay.
const DefaultMaxSkew = 5 * time.Minute

// Verify checks X-Slack-Signature: "v0=" + hex HMAC-SHA256(signing secret,
// "v0:" + X-Slack-Request-Timestamp + ":" + raw body), compared in constant
// time, and refuses a timestamp more than MaxSkew from r.Received (the clock
// when Received is zero). It returns mappers.ErrNoSecret without a secret and a
// *mappers.SignatureError otherwise.
//
// The scheme is the one slack.NewSecretsVerifier implements (a test checks the
// two agree); it is written out here because slack-go measures the window
// against the wall clock, while the gateway hands the receive time in.
func (p *Provider) Verify(r *mappers.Request) error {
	if !p.cfg.Secret.IsSet() {
		return mappers.ErrNoSecret
	}
	sig := r.Header.Get(HeaderSignature)
	ts := r.Header.Get(HeaderTimestamp)
	if sig == "" {
		return sigErr("missing " + HeaderSignature)
	}
	if ts == "" {
		return sigErr("missing " + HeaderTimestamp)
	}
	hexSig, ok := strings.CutPrefix(sig, "v0=")
	if !ok {
		return sigErr("signature is not v0")
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return sigErr("signature is not a hex SHA-256 digest")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return sigErr("timestamp is not a number")
	}
	now := r.Received
	if now.IsZero() {
		now = p.now()
	}
	// Compare in seconds so that absurd timestamps cannot overflow a Duration.
	skew := now.Unix() - sec
	if skew < 0 {
		skew = -skew
	}
	if skew < 0 || skew > int64(p.cfg.MaxSkew/time.Second) {
		return sigErr("timestamp outside the " + p.cfg.MaxSkew.String() + " window")
	}
	if !hmac.Equal(got, Sign(p.cfg.Secret.Reveal(), ts, r.Body)) {
		return sigErr("signature mismatch")
	}
	return nil
}

// Sign returns the raw v0 HMAC-SHA256 of "v0:{timestamp}:{body}" under secret.
// Tests and load generators use it to sign requests; the header value is
// "v0=" + hex.EncodeToString(Sign(...)).
func Sign(secret, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:"))
	m.Write([]byte(timestamp))
	m.Write([]byte(":"))
	m.Write(body)
	return m.Sum(nil)
}

// SignatureHeader returns the X-Slack-Signature value for body sent at timestamp.
func SignatureHeader(secret, timestamp string, body []byte) string {
	return "v0=" + hex.EncodeToString(Sign(secret, timestamp, body))
}

func sigErr(reason string) error {
	return &mappers.SignatureError{Provider: Name, Reason: reason}
}
