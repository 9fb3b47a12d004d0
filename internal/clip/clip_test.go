package clip_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/relaystation/relay/internal/clip"
)

func TestPrefix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, s string
		n       int
		want    string
	}{
		{"fits", "hello", 5, "hello"},
		{"longer bound", "hello", 50, "hello"},
		{"ascii cut", "hello", 3, "hel"},
		{"zero", "hello", 0, ""},
		{"negative", "hello", -1, ""},
		{"empty", "", 3, ""},
		{"before a 2-byte char", "aé", 2, "a"},        // é = c3 a9
		{"after a 2-byte char", "aéb", 3, "aé"},       //
		{"inside a 3-byte char", "a€b", 2, "a"},       // € = e2 82 ac
		{"inside a 3-byte char, 2 in", "a€b", 3, "a"}, //
		{"after a 3-byte char", "a€b", 4, "a€"},       //
		{"inside a 4-byte char", "😀x", 3, ""},         // f0 9f 98 80
		{"inside a 4-byte char at 1", "😀x", 1, ""},    //
		{"after a 4-byte char", "😀x", 4, "😀"},         //
		{"first char too long", "€", 2, ""},           //
		{"stray continuation bytes", "ab\x80\x80\x80\x80c", 4, "ab\x80\x80"},
		{"truncated sequence", "ab\xe2\x82", 3, "ab\xe2"}, // not a character: cut anywhere
		{"invalid start byte", "a\xffb", 2, "a\xff"},
		{"encoded U+FFFD", "a\uFFFDb", 2, "a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := clip.Prefix(tc.s, tc.n); got != tc.want {
				t.Errorf("Prefix(%q, %d): got %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}

func TestMarkers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"To fits", clip.To("héllo", 6), "héllo"},
		{"To cut", clip.To("héllo", 2), "h…"},
		{"Mark", clip.Mark("line one\nline two", 8, "\n… (truncated)"), "line one\n… (truncated)"},
		{"Mark fits", clip.Mark("short", 5, "!"), "short"},
		{"Within fits exactly", clip.Within("abcdef", 6), "abcdef"},
		{"Within cut", clip.Within("abcdefgh", 6), "abc…"},
		{"Within cut before a char", clip.Within("ab€€", 6), "ab…"},
		{"Within too small", clip.Within("abcdef", 2), "…"},
		{"Chars fits", clip.Chars("héllo", 5), "héllo"},
		{"Chars cut", clip.Chars("héllo wörld", 5), "héll…"},
		{"Chars wide", clip.Chars("日本語のテキスト", 4), "日本語…"},
		{"Chars one", clip.Chars("abc", 1), "…"},
		{"Chars invalid bytes", clip.Chars("a\xff\xfebc", 3), "a\xff…"},
		{"Line", clip.Line("first\nsecond", 10), "first"},
		{"Line cut", clip.Line("first line is long\nsecond", 5), "first…"},
		{"Line no newline", clip.Line("only", 10), "only"},
		{"Line empty first", clip.Line("\nsecond", 10), ""},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// FuzzPrefix checks Prefix's contract on any input: a prefix of at most n
// bytes, at most three shorter, valid UTF-8 when s is, and maximal (the next
// character would not fit).
func FuzzPrefix(f *testing.F) {
	for _, s := range []string{"", "hello", "aé€😀", "ab\x80\x80\x80c", "\xe2\x82", "\xf0\x9f\x98", strings.Repeat("€", 10)} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = n % 64
		got := clip.Prefix(s, n)
		if !strings.HasPrefix(s, got) {
			t.Fatalf("Prefix(%q, %d) = %q: not a prefix", s, n, got)
		}
		if len(got) > max(n, 0) {
			t.Fatalf("Prefix(%q, %d) = %q: longer than %d", s, n, got, n)
		}
		if n < len(s) && len(got) < n-3 {
			t.Fatalf("Prefix(%q, %d) = %q: cut more than a character", s, n, got)
		}
		if utf8.ValidString(s) {
			if !utf8.ValidString(got) {
				t.Fatalf("Prefix(%q, %d) = %q: cut a character in half", s, n, got)
			}
			if rest := s[len(got):]; rest != "" {
				if _, size := utf8.DecodeRuneInString(rest); len(got)+size <= n {
					t.Fatalf("Prefix(%q, %d) = %q: the next character fits too", s, n, got)
				}
			}
		}
		if w := clip.Within(s, n); len(s) > n && n >= len(clip.Ellipsis) && len(w) > n {
			t.Fatalf("Within(%q, %d) = %q: longer than %d", s, n, w, n)
		}
		if c := clip.Chars(s, n); n >= 1 && utf8.RuneCountInString(c) > n {
			t.Fatalf("Chars(%q, %d) = %q: more than %d characters", s, n, c, n)
		}
	})
}

func ExampleTo() {
	// 3 bytes would end inside "é"; the cut steps back to a whole character.
	fmt.Println(clip.To("héllo", 2))
	fmt.Println(clip.Line("dial tcp: connection refused\ngoroutine 1 [running]:", 100))
	// Output:
	// h…
	// dial tcp: connection refused
}
