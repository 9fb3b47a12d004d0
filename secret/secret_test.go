package secret_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
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
		"xapp-1-A0123-4567-abcdef0123", "sk-proj-" + strings.Repeat("x", 24), "glpat-" + strings.Repeat("z", 20), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"AKIAIOSFODNN7EXAMPLE", `aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYAA"`,
		"Aws_Secret_Access_Key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYAA",
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
	for _, ok := range []string{"ghost town", "a sketch", "xox", "the AKIA team", "BEGIN work",
		"aws_\u017Fecret_access_\u212Aey = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYAA"} { // long s, Kelvin sign: not ASCII
		if secret.TokenPattern.MatchString(ok) {
			t.Errorf("TokenPattern matched plain text %q", ok)
		}
	}
}

// TestRedact: each redactor replaces what it stands for, says how many, and
// leaves the rest as written.
func TestRedact(t *testing.T) {
	t.Parallel()
	pat := "ghp_" + strings.Repeat("a", 36)
	type tcase struct {
		in, want string
		n        int
	}
	for name, r := range map[string]struct {
		redact func(s, repl string) (string, int)
		cases  []tcase
	}{
		"RedactBearer": {secret.RedactBearer, []tcase{
			{"Authorization: Bearer abc.def-ghi_jkl", "Authorization: Bearer [X]", 1},
			{"authorization: bearer abcdefgh12345678==", "authorization: bearer [X]", 1},
			{"BeArEr abcdefgh12345678", "BeArEr [X]", 1},
			{"Basic dXNlcjpwYXNzd29yZA==", "Basic [X]", 1},
			{"Authorization: token 0123456789abcdef0123456789abcdef01234567", "Authorization: token [X]", 1},
			{"Bearer  aaaaaaaa and token\tbbbbbbbb", "Bearer  [X] and token\t[X]", 2},
			{"Bearer short", "Bearer short", 0},
			{"no credentials here", "no credentials here", 0},
			{"tokens abcdefghijk", "tokens abcdefghijk", 0},
			{"to\u212Aen abcdefghijk", "to\u212Aen abcdefghijk", 0}, // KELVIN SIGN: not ASCII "token"
		}},
		"RedactTokens": {secret.RedactTokens, []tcase{
			{"the token " + pat + " expired", "the token [X] expired", 1},
			{"AKIAIOSFODNN7EXAMPLE and xoxb-1234567890-abcdefghij", "[X] and [X]", 2},
			{"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY----- after", "[X] after", 1},
			{"Bearer abcdefgh12345678 stays: prose says token expiry too", "Bearer abcdefgh12345678 stays: prose says token expiry too", 0},
			{"though the high light ghosts", "though the high light ghosts", 0},
			{"", "", 0},
		}},
	} {
		for _, tc := range r.cases {
			got, n := r.redact(tc.in, "[X]")
			if got != tc.want || n != tc.n {
				t.Errorf("%s(%q): got %q, %d; want %q, %d", name, tc.in, got, n, tc.want, tc.n)
			}
		}
	}
}

// FuzzMayHoldBearer: the pre-check never hides a match, and a redacted text
// holds no credential.
func FuzzMayHoldBearer(f *testing.F) {
	fuzzPreCheck(f, secret.BearerPattern, secret.MayHoldBearer, secret.RedactBearer,
		"Bearer abcdefgh", "bAsIc xxxxxxxxxx", "TOKEN 12345678", "plain", "béarer x", "ba\u017Fic 12345678")
}

// fuzzPreCheck fuzzes a redactor: mayHold never says no where pattern
// matches, and what redact returns holds no match.
func fuzzPreCheck(f *testing.F, pattern *regexp.Regexp, mayHold func(string) bool, redact func(s, repl string) (string, int), seeds ...string) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if pattern.MatchString(s) && !mayHold(s) {
			t.Fatalf("the pre-check says no for %q, but the pattern matches", s)
		}
		if got, _ := redact(s, "[X]"); pattern.MatchString(got) {
			t.Fatalf("redacting %q left %q, which still holds a credential", s, got)
		}
	})
}

// FuzzMayHoldToken: the pre-check never hides a match, and a redacted text
// holds no credential.
func FuzzMayHoldToken(f *testing.F) {
	fuzzPreCheck(f, secret.TokenPattern, secret.MayHoldToken, secret.RedactTokens,
		"ghp_"+strings.Repeat("a", 36), "xoxb-1234567890-abcdefghij", "AKIAIOSFODNN7EXAMPLE",
		"aws_secret_access_key = "+strings.Repeat("k", 40), "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz", "plain gh text")
}

// The pre-check rules out prose that holds a shape's literal inside a word,
// and still finds each shape at a word's start, in any case where the
// pattern folds case.
func TestMayHoldTokenAtWordStarts(t *testing.T) {
	t.Parallel()
	for _, prose := range []string{"the task-list-for-the-release-train", "a risk-based-approach-to-everything", "honeyJar",
		"thighp_ x", "MALAYSIAN markets", "my_aws_secret_access_key_is_not_here"[:20]} {
		if secret.MayHoldToken(prose) {
			t.Errorf("MayHoldToken(%q) = true, want false: no shape starts a word there", prose)
		}
	}
	for _, text := range []string{"(sk-" + strings.Repeat("x", 24) + ")", "key:ghp_" + strings.Repeat("a", 36),
		"AWS_SECRET_ACCESS_KEY=" + strings.Repeat("k", 40), "-xoxb-1234567890-abcdefghij", "x eyJ"} {
		if !secret.MayHoldToken(text) {
			t.Errorf("MayHoldToken(%q) = false, want true", text)
		}
	}
}

// RememberAs keeps only a key's latest values: a refreshed token replaces
// the old one among the known secrets (the set stays as large as the
// grants), and no values forget the key.
func TestRememberAsReplaces(t *testing.T) {
	secret.RememberAs("grant-test", "old-access-token-1a2b")
	if got, _ := secret.RedactKnown("x old-access-token-1a2b"); got != "x [REDACTED]" {
		t.Errorf("got %q, want the old token redacted", got)
	}
	secret.RememberAs("grant-test", "new-access-token-3c4d")
	if got, _ := secret.RedactKnown("old-access-token-1a2b new-access-token-3c4d"); got != "old-access-token-1a2b [REDACTED]" {
		t.Errorf("got %q, want only the new token redacted", got)
	}
	secret.RememberAs("grant-test")
	if got, changed := secret.RedactKnown("new-access-token-3c4d"); changed {
		t.Errorf("got %q, want the forgotten key's token left", got)
	}
}
