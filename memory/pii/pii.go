// Package pii removes personal data and credentials from text before it is
// kept in long-term memory: e-mail addresses, phone numbers, payment card
// numbers (only digit runs that pass the Luhn check), IPv4 and IPv6 addresses,
// API tokens and keys (GitHub, Slack, OpenAI-style, AWS, JWTs, bearer tokens,
// key=value secrets), and the personal names a deployment lists.
//
// Each finding is replaced by a bracketed label such as [EMAIL] or [CARD], so
// the text keeps its shape and the scrubbing is visible to a reader.
package pii

import (
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"github.com/relaystation/relay/secret"
)

// Kind names what was removed; it is also the replacement label.
type Kind string

// The kinds of findings.
const (
	Email Kind = "EMAIL"
	Phone Kind = "PHONE"
	Card  Kind = "CARD"
	IP    Kind = "IP"
	Token Kind = "TOKEN"
	Name  Kind = "NAME"
)

// Report counts what Scrub removed, by kind.
type Report map[Kind]int

// Total is the number of findings.
func (r Report) Total() int {
	n := 0
	for _, c := range r {
		n += c
	}
	return n
}

// Scrubber removes personal data. It is safe for concurrent use.
type Scrubber struct {
	names *regexp.Regexp
}

// New returns a scrubber that also removes the given personal names (matched
// case-insensitively as whole words; empty entries are ignored).
func New(names []string) *Scrubber {
	s := &Scrubber{}
	var alts []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			alts = append(alts, regexp.QuoteMeta(n))
		}
	}
	if len(alts) > 0 {
		// Longest first, so "Ann Lee" wins over "Ann".
		sort.Slice(alts, func(i, j int) bool { return len(alts[i]) > len(alts[j]) })
		s.names = regexp.MustCompile(`(?i)\b(?:` + strings.Join(alts, "|") + `)\b`)
	}
	return s
}

var (
	// Credentials: the shapes the tool runner redacts too.
	reTokens = []*regexp.Regexp{secret.TokenPattern}
	// "token: xyz", "api_key=xyz", "password = xyz": keep the label, drop the
	// value ("Bearer xyz" is secret.RedactBearer).
	reKV    = regexp.MustCompile(`(?i)\b((?:api[_-]?key|apikey|secret|token|password|passwd|pwd|access[_-]?key|client[_-]?secret|auth)["']?\s*[:=]\s*["']?)([^\s"',;]{6,})`)
	reEmail = regexp.MustCompile(`(?i)\b[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}\b`)
	// Card candidates: 13-19 digits, optionally grouped by spaces or dashes.
	reCard = regexp.MustCompile(`\b\d(?:[ -]?\d){12,18}\b`)
	reIPv4 = regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}\b`)
	reIPv6 = regexp.MustCompile(`(?i)(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}`)
	// Phones: international (+CC ...) or grouped national numbers with 7-15 digits.
	rePhone = regexp.MustCompile(`(?:\+\d{1,3}[\s.-]?)?(?:\(\d{1,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]\d{2,4}){1,4}\b|\+\d{7,15}\b`)
)

// Scrub returns text with personal data replaced and a count of what was
// replaced. Scrubbing scrubbed text changes nothing: the passes repeat until
// the text is stable (a replacement can expose a new match, such as digits
// next to a removed phone number).
func (s *Scrubber) Scrub(text string) (string, Report) {
	r := Report{}
	for range 8 {
		out := s.pass(text, r)
		if out == text {
			break
		}
		text = out
	}
	for k, v := range r {
		if v == 0 {
			delete(r, k)
		}
	}
	return text, r
}

func (s *Scrubber) pass(text string, r Report) string {
	if secret.MayHoldToken(text) { // the pattern is slow; most text is ruled out first
		for _, re := range reTokens {
			text = replace(re, text, Token, r, nil)
		}
	}
	text, n := secret.RedactBearer(text, "[TOKEN]")
	r[Token] += n
	text = reKV.ReplaceAllStringFunc(text, func(m string) string {
		sub := reKV.FindStringSubmatch(m)
		if sub[2] == "[TOKEN]" || strings.HasPrefix(sub[2], "[") {
			return m
		}
		r[Token]++
		return sub[1] + "[TOKEN]"
	})
	text = replace(reEmail, text, Email, r, nil)
	text = replace(reCard, text, Card, r, luhnDigits)
	text = replace(reIPv4, text, IP, r, func(m string) bool {
		a, err := netip.ParseAddr(m)
		return err == nil && a.Is4()
	})
	text = replace(reIPv6, text, IP, r, func(m string) bool {
		if strings.Count(m, ":") < 2 {
			return false
		}
		a, err := netip.ParseAddr(m)
		return err == nil && a.Is6() && m != "::"
	})
	text = replace(rePhone, text, Phone, r, phoneLike)
	if s != nil && s.names != nil {
		text = replace(s.names, text, Name, r, nil)
	}
	return text
}

func replace(re *regexp.Regexp, text string, k Kind, r Report, keep func(string) bool) string {
	return re.ReplaceAllStringFunc(text, func(m string) string {
		if keep != nil && !keep(m) {
			return m
		}
		r[k]++
		return "[" + string(k) + "]"
	})
}

// luhnDigits reports whether the digits of s pass the Luhn check.
func luhnDigits(s string) bool {
	var digits []int
	for _, c := range s {
		if c >= '0' && c <= '9' {
			digits = append(digits, int(c-'0'))
		}
	}
	if len(digits) < 13 || len(digits) > 19 {
		return false
	}
	return Luhn(digits)
}

// Luhn reports whether the digit sequence passes the Luhn checksum.
func Luhn(digits []int) bool {
	sum := 0
	double := false
	for i := len(digits) - 1; i >= 0; i-- {
		d := digits[i]
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return len(digits) > 0 && sum%10 == 0
}

// phoneLike keeps dates, versions and short numbers out of the phone matches:
// a phone has 7 to 15 digits and is not an ISO date.
func phoneLike(m string) bool {
	n := 0
	for _, c := range m {
		if unicode.IsDigit(c) {
			n++
		}
	}
	if n < 7 || n > 15 {
		return false
	}
	if isoDate.MatchString(m) {
		return false
	}
	return true
}

var isoDate = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}`)
