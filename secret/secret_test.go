package secret_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/relaystation/relay/secret"
)

func TestNeverPrinted(t *testing.T) {
	t.Parallel()
	s := secret.New("xoxb-super-secret")
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("cfg", "token", s, "nested", struct{ T secret.Value }{s})
	j, _ := json.Marshal(struct{ T secret.Value }{s})
	out := buf.String() + fmt.Sprint(s) + fmt.Sprintf("%v %+v %#v %s %q", s, s, s, s, s) + string(j)
	if strings.Contains(out, "super-secret") {
		t.Fatalf("secret leaked: %s", out)
	}
	if got := s.Reveal(); got != "xoxb-super-secret" {
		t.Errorf("got Reveal %q, want the value", got)
	}
	if secret.New("").IsSet() || !s.IsSet() {
		t.Error("IsSet is wrong")
	}
}

func TestTokenPattern(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{
		"ghp_" + strings.Repeat("a", 36), "github_pat_" + strings.Repeat("B", 40), "xoxb-1234567890-abcdefghij",
		"xapp-1-A0123-4567-abcdef0123", "sk-proj-" + strings.Repeat("x", 24), "glpat-" + strings.Repeat("z", 20),
		"AKIAIOSFODNN7EXAMPLE", `aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYAA"`,
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
		"-----BEGIN PRIVATE KEY-----\ntruncated",
	} {
		text := "see " + tok + " here"
		if !secret.MayHoldToken(text) {
			t.Errorf("MayHoldToken missed %q", tok)
		}
		if !secret.TokenPattern.MatchString(text) {
			t.Errorf("TokenPattern missed %q", tok)
		}
	}
	for _, ok := range []string{"ghost town", "a sketch", "xox", "the AKIA team", "BEGIN work"} {
		if secret.TokenPattern.MatchString(ok) {
			t.Errorf("TokenPattern matched plain text %q", ok)
		}
	}
}
