package pii

import (
	"strings"
	"testing"
)

func TestScrub(t *testing.T) {
	t.Parallel()
	s := New([]string{"Ann Lee", "Bob", " "})
	tests := []struct {
		name, in, want string
		kind           Kind
	}{
		{"email", "write to ann.lee+x@example.co.uk today", "write to [EMAIL] today", Email},
		{"phone international", "call +49 30 1234 5678 now", "call [PHONE] now", Phone},
		{"phone us", "call (555) 123-4567", "call [PHONE]", Phone},
		{"card valid luhn", "card 4111 1111 1111 1111 ok", "card [CARD] ok", Card},
		{"card dashes", "4012-8888-8888-1881", "[CARD]", Card},
		{"ipv4", "from 192.168.10.4:22", "from [IP]:22", IP},
		{"ipv6", "host 2001:db8::8a2e:370:7334 down", "host [IP] down", IP},
		{"github token", "token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "token [TOKEN]", Token},
		{"slack token", "xoxb-123456789012-abcdefghijkl", "[TOKEN]", Token},
		{"openai key", "use sk-proj-abcdefghijklmnopqrstuvwx", "use [TOKEN]", Token},
		{"aws key", "AKIAIOSFODNN7EXAMPLE", "[TOKEN]", Token},
		{"jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.abcdefghijk_l", "[TOKEN]", Token},
		{"bearer", "Authorization: Bearer abcdef123456789xyz", "Authorization: Bearer [TOKEN]", Token},
		{"github scheme", "Authorization: token 0123456789abcdef0123", "Authorization: token [TOKEN]", Token},
		{"key value", "api_key=s3cr3tvalue and password: hunter22", "api_key=[TOKEN] and password: [TOKEN]", Token},
		{"names", "ann lee and Bob met Bobby", "[NAME] and [NAME] met Bobby", Name},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, rep := s.Scrub(tt.in)
			if got != tt.want {
				t.Fatalf("Scrub(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if rep[tt.kind] == 0 {
				t.Fatalf("report %v has no %s", rep, tt.kind)
			}
		})
	}
}

func TestScrubKeeps(t *testing.T) {
	t.Parallel()
	s := New(nil)
	for _, in := range []string{
		"card 4111 1111 1111 1112 fails Luhn",
		"released 2024-05-01 as v1.2.3 at 12:30:45",
		"issue #1234 has 3 comments",
		"version 999.1.1.1 is not an IP",
		"plain words only",
	} {
		got, rep := s.Scrub(in)
		if got != in || rep.Total() != 0 {
			t.Errorf("Scrub(%q) = %q (%v), want unchanged", in, got, rep)
		}
	}
}

func TestLuhn(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want bool
	}{{"4111111111111111", true}, {"4111111111111112", false}, {"79927398713", true}, {"", false}} {
		d := make([]int, 0, len(tt.in))
		for _, c := range tt.in {
			d = append(d, int(c-'0'))
		}
		if got := Luhn(d); got != tt.want {
			t.Errorf("Luhn(%s) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func FuzzScrub(f *testing.F) {
	for _, s := range []string{"ann@example.com", "4111 1111 1111 1111", "10.0.0.1", "::1", "+1 555 123 4567",
		"Bearer abcdefghijklmnop", "token=abcdefgh", "ghp_abcdefghijklmnopqrstuvwxyz", "Ann", "", "ü@ä.de"} {
		f.Add(s)
	}
	s := New([]string{"Ann", "Bob Smith"})
	f.Fuzz(func(t *testing.T, in string) {
		out, _ := s.Scrub(in)
		again, rep := s.Scrub(out)
		if again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", in, out, again, rep)
		}
		if reEmail.MatchString(out) {
			t.Fatalf("email left in %q", out)
		}
		if strings.Contains(strings.ToLower(out), "bob smith") {
			t.Fatalf("listed name left in %q", out)
		}
	})
}
