package envelope_test

import (
	"strings"
	"testing"

	"github.com/relaystation/relay/envelope"
)

func TestTokenBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 4096)
	for name, tc := range map[string]struct{ in, want string }{
		"at the cap":     {strings.Repeat("a", envelope.MaxToken), strings.Repeat("a", envelope.MaxToken)},
		"over the cap":   {long, strings.Repeat("x", envelope.MaxToken-9) + "_a2e659da"},
		"dirty and long": {strings.Repeat("a.b ", 100), strings.Repeat("a_b_", 13) + "a_b_662cde92"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := envelope.Token(tc.in); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	if a, b := envelope.Token(long+"a"), envelope.Token(long+"b"); a == b {
		t.Errorf("got %q for two distinct long values, want distinct tokens", a)
	}
}

func FuzzToken(f *testing.F) {
	f.Add("issues")
	f.Add("a.b *>")
	f.Add(strings.Repeat("é", 100))
	f.Fuzz(func(t *testing.T, s string) {
		got := envelope.Token(s)
		if got == "" || len(got) > envelope.MaxToken {
			t.Fatalf("Token(%q) = %q: want 1 to %d bytes", s, got, envelope.MaxToken)
		}
		for i := 0; i < len(got); i++ {
			c := got[i]
			if c == '.' || c == '*' || c == '>' || c <= ' ' || c >= 0x7f {
				t.Fatalf("Token(%q) = %q: byte %q is not a token byte", s, got, c)
			}
		}
		if len(s) <= envelope.MaxToken && envelope.Token(got) != got {
			t.Fatalf("Token is not idempotent on %q", s)
		}
	})
}
