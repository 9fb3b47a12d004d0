package openproject_test

import (
	"testing"

	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/openproject"
	"github.com/relaystation/relay/secret"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"work_package:created","work_package":{"id":1}}`)
	good := openproject.SignatureHeader(testSecret, body)
	sig := mapperstest.ErrSignature
	cases := append(mapperstest.BasicVerifyCases(testSecret, body, good), []mapperstest.VerifyCase{
		{Name: "no prefix", Secret: testSecret, Sig: good[len("sha1="):], Body: body, Want: sig},
		{Name: "sha256 prefix", Secret: testSecret, Sig: "sha256=" + good[len("sha1="):], Body: body, Want: sig},
		{Name: "not hex", Secret: testSecret, Sig: "sha1=zz", Body: body, Want: sig},
		{Name: "truncated", Secret: testSecret, Sig: good[:20], Body: body, Want: sig},
	}...)
	mapperstest.RunVerifyCases(t, "openproject", openproject.HeaderSignature, func(s string) mappers.Provider {
		return openproject.New(openproject.Config{Secret: secret.New(s)})
	}, cases)
}
