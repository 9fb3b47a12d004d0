package sentry_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/secret"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"created","data":{"issue":{"id":"1"}}}`)
	good := sentry.SignatureHeader(testSecret, body)
	tests := []struct {
		name, secret, sig string
		body              []byte
		want              string // "" ok, "nosecret", "sig"
	}{
		{"valid", testSecret, good, body, ""},
		{"no secret", "", good, body, "nosecret"},
		{"missing signature", testSecret, "", body, "sig"},
		{"wrong secret", "other", good, body, "sig"},
		{"tampered body", testSecret, good, append(body, ' '), "sig"},
		{"uppercase hex is the same digest", testSecret, strings.ToUpper(good), body, ""},
		{"sha256= prefix is not Sentry's scheme", testSecret, "sha256=" + good, body, "sig"},
		{"not hex", testSecret, "zz", body, "sig"},
		{"truncated", testSecret, good[:40], body, "sig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := sentry.New(sentry.Config{Secret: secret.New(tt.secret)})
			h := http.Header{}
			if tt.sig != "" {
				h.Set(sentry.HeaderSignature, tt.sig)
			}
			err := p.Verify(&mappers.Request{Header: h, Body: tt.body, Received: received})
			var se *mappers.SignatureError
			switch tt.want {
			case "":
				if err != nil {
					t.Errorf("got %v, want nil", err)
				}
			case "nosecret":
				if !errors.Is(err, mappers.ErrNoSecret) {
					t.Errorf("got %v, want ErrNoSecret", err)
				}
			default:
				if !errors.As(err, &se) || se.Provider != "sentry" {
					t.Errorf("got %v, want a sentry *mappers.SignatureError", err)
				}
			}
		})
	}
}
