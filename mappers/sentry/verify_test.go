package sentry_test

import (
	"strings"
	"testing"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/sentry"
	"github.com/relaystation/relay/secret"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"created","data":{"issue":{"id":"1"}}}`)
	good := sentry.SignatureHeader(testSecret, body)
	sig := mapperstest.ErrSignature
	cases := append(mapperstest.BasicVerifyCases(testSecret, body, good), []mapperstest.VerifyCase{
		{Name: "uppercase hex is the same digest", Secret: testSecret, Sig: strings.ToUpper(good), Body: body},
		{Name: "sha256= prefix is not Sentry's scheme", Secret: testSecret, Sig: "sha256=" + good, Body: body, Want: sig},
		{Name: "not hex", Secret: testSecret, Sig: "zz", Body: body, Want: sig},
		{Name: "truncated", Secret: testSecret, Sig: good[:40], Body: body, Want: sig},
	}...)
	mapperstest.RunVerifyCases(t, "sentry", sentry.HeaderSignature, func(s string) mappers.Provider {
		return sentry.New(sentry.Config{Secret: secret.New(s)})
	}, cases)
}
