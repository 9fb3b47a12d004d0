package openproject_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/secret"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"work_package:created","work_package":{"id":1}}`)
	good := openproject.SignatureHeader(testSecret, body)
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
		{"no prefix", testSecret, good[len("sha1="):], body, "sig"},
		{"sha256 prefix", testSecret, "sha256=" + good[len("sha1="):], body, "sig"},
		{"not hex", testSecret, "sha1=zz", body, "sig"},
		{"truncated", testSecret, good[:20], body, "sig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := openproject.New(openproject.Config{Secret: secret.New(tt.secret)})
			h := http.Header{}
			if tt.sig != "" {
				h.Set(openproject.HeaderSignature, tt.sig)
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
				if !errors.As(err, &se) || se.Provider != "openproject" {
					t.Errorf("got %v, want an openproject *mappers.SignatureError", err)
				}
			}
		})
	}
}
