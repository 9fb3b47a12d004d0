package slack

import (
	"net/url"
	"regexp"
	"strings"
)

// RefLinker returns the URL of a cited reference ([[ref:id]] in an answer),
// or "" when there is none.
type RefLinker func(id string) string

// Mrkdwn converts Markdown (CommonMark and the GitHub extensions an LLM
// writes) to Slack's mrkdwn:
//
//   - **bold** and __bold__ become *bold*; *italic* and _italic_ become
//     _italic_; ~~strike~~ becomes ~strike~; `code` stays.
//   - Fenced code blocks become ``` blocks (the language is dropped, the content
//     is kept verbatim apart from escaping); tables become code blocks too.
//   - # Headings (and setext headings) become bold lines.
//   - [text](url), ![alt](url) and <https://...> become <url|text> links for
//     http, https and mailto URLs; other URLs keep only their text.
//   - "- item" and "* item" become "• item", nested by indentation; "1. item"
//     stays; task items show ☐ and ☑; "> quote" stays a quote; rules become a line.
//   - [[ref:id]] becomes <url|ref:id> when ref returns a URL, else "[ref:id]".
//   - &, < and > are escaped everywhere else, so text can never mention
//     @channel or inject links; user and channel mentions (<@U123>, <#C123>)
//     are kept.
//
// It never fails: text it does not recognise is passed through, escaped.
func Mrkdwn(md string, ref RefLinker) string {
	c := &converter{ref: ref}
	return c.convert(md)
}

type converter struct {
	ref RefLinker
	// label is set while converting a link's text: links, images and
	// mentions are plain text there.
	label bool
}

var (
	reFence    = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})(.*)$")
	reHeading  = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	reRule     = regexp.MustCompile(`^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$`)
	reSetext   = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	reQuote    = regexp.MustCompile(`^ {0,3}>[ ]?(.*)$`)
	reBullet   = regexp.MustCompile(`^([ \t]*)[-*+][ \t]+(.*)$`)
	reOrdered  = regexp.MustCompile(`^([ \t]*)(\d{1,9})[.)][ \t]+(.*)$`)
	reTask     = regexp.MustCompile(`^\[([ xX])\][ \t]+(.*)$`)
	reTableSep = regexp.MustCompile(`^[ \t]*\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$`)
	reMention  = regexp.MustCompile(`^<(?:@[UWB][A-Z0-9]{2,}|#C[A-Z0-9]{2,}(?:\|[^<>|\n]{0,80})?)>`)
	reAutolink = regexp.MustCompile(`^<((?:https?://|mailto:)[^\s<>]+)>`)
	reRefID    = regexp.MustCompile(`^\[\[ref:([^\[\]\s]{1,200})\]\]`)
)

func (c *converter) convert(md string) string {
	md = strings.TrimRight(strings.ReplaceAll(md, "\r\n", "\n"), "\n")
	lines := strings.Split(md, "\n")
	out := make([]string, 0, len(lines))
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := reFence.FindStringSubmatch(line); m != nil && !(m[1][0] == '`' && strings.Contains(m[2], "`")) {
			fence := m[1]
			out = append(out, "```")
			j := i + 1
			for ; j < len(lines); j++ {
				if closes(lines[j], fence) {
					break
				}
				// A ``` inside the block would end it in Slack.
				out = append(out, strings.ReplaceAll(escape(lines[j]), "```", "``\u200b`"))
			}
			out = append(out, "```")
			i = j
			continue
		}
		if strings.Contains(line, "|") && i+1 < len(lines) && strings.Contains(lines[i+1], "-") && reTableSep.MatchString(lines[i+1]) {
			out = append(out, "```")
			j := i
			for ; j < len(lines) && strings.Contains(lines[j], "|"); j++ {
				out = append(out, escape(strings.TrimSpace(lines[j])))
			}
			out = append(out, "```")
			i = j - 1
			continue
		}
		if m := reHeading.FindStringSubmatch(line); m != nil {
			if t := strings.TrimSpace(m[2]); t != "" {
				out = append(out, "*"+c.inline(t, true)+"*")
			}
			continue
		}
		if strings.TrimSpace(line) != "" && !reRule.MatchString(line) && reQuote.FindStringIndex(line) == nil &&
			reBullet.FindStringIndex(line) == nil && reOrdered.FindStringIndex(line) == nil &&
			i+1 < len(lines) && reSetext.MatchString(lines[i+1]) && !prevIsText(lines, i) {
			out = append(out, "*"+c.inline(strings.TrimSpace(line), true)+"*")
			i++
			continue
		}
		if reRule.MatchString(line) {
			out = append(out, "──────────")
			continue
		}
		if m := reQuote.FindStringSubmatch(line); m != nil {
			out = append(out, "> "+c.block(m[1]))
			continue
		}
		out = append(out, c.block(line))
	}
	return strings.TrimRight(strings.Join(out, "\n"), "\n ")
}

// prevIsText reports whether the line before i continues a paragraph (then a
// "---" under line i still makes a setext heading of the whole paragraph; we
// only bold single-line ones and leave longer paragraphs as text).
func prevIsText(lines []string, i int) bool {
	return i > 0 && strings.TrimSpace(lines[i-1]) != "" && !reHeading.MatchString(lines[i-1])
}

// block converts one line that is not a fence, heading or rule: list items
// get their bullet, anything else is inline text.
func (c *converter) block(line string) string {
	if m := reBullet.FindStringSubmatch(line); m != nil {
		return indent(m[1]) + "• " + c.task(m[2])
	}
	if m := reOrdered.FindStringSubmatch(line); m != nil {
		return indent(m[1]) + m[2] + ". " + c.task(m[3])
	}
	return c.inline(line, false)
}

func (c *converter) task(s string) string {
	if m := reTask.FindStringSubmatch(s); m != nil {
		box := "☐ "
		if m[1] != " " {
			box = "☑ "
		}
		return box + c.inline(m[2], false)
	}
	return c.inline(s, false)
}

// indent maps Markdown list indentation (2 to 4 columns per level) to Slack's
// (4 spaces per level; Slack keeps leading spaces).
func indent(ws string) string {
	cols := 0
	for _, r := range ws {
		if r == '\t' {
			cols += 4
		} else {
			cols++
		}
	}
	return strings.Repeat("    ", min(cols/2, 8))
}

func closes(line, fence string) bool {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return false
	}
	n := 0
	for n < len(t) && t[n] == fence[0] {
		n++
	}
	return n >= len(fence) && strings.TrimSpace(t[n:]) == ""
}

// inline converts the spans of one line. Inside bold (a heading, or nested
// bold) bold delimiters are dropped, because mrkdwn cannot nest them.
func (c *converter) inline(s string, bold bool) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		out, n := c.span(s, i, bold)
		b.WriteString(out)
		i += n
	}
	return b.String()
}

// span converts the span that starts at s[i] and returns its mrkdwn and the
// number of bytes of s it consumed (at least one). Inside a link's label,
// links, images and mentions are plain text.
func (c *converter) span(s string, i int, bold bool) (string, int) {
	switch ch := s[i]; ch {
	case '\\':
		if i+1 < len(s) && isASCIIPunct(s[i+1]) {
			return escape(s[i+1 : i+2]), 2
		}
	case '`':
		return codeSpan(s, i)
	case '[':
		if !c.label {
			if out, n, ok := c.refOrLink(s[i:]); ok {
				return out, n
			}
		}
	case '!':
		if !c.label {
			if out, n, ok := image(s[i:]); ok {
				return out, n
			}
		}
	case '<':
		if !c.label {
			if out, n, ok := autolinkOrMention(s[i:]); ok {
				return out, n
			}
		}
	case '*', '_', '~':
		if out, n, ok := c.emphasis(s, i, bold); ok {
			return out, n
		}
		n := run(s, i, ch)
		return s[i : i+n], n
	}
	return escape(s[i : i+1]), 1
}

// codeSpan converts the backtick run at s[i] with its closing run: the code
// keeps its text (escaped, one padding space each side dropped, inner
// backticks turned into quotes) and an empty span disappears. A run without
// a closer is passed through as it is.
func codeSpan(s string, i int) (string, int) {
	n := run(s, i, '`')
	end := findRun(s, i+n, '`', n)
	if end < 0 {
		return s[i : i+n], n
	}
	code := s[i+n : end]
	if len(code) > 2 && code[0] == ' ' && code[len(code)-1] == ' ' {
		code = code[1 : len(code)-1]
	}
	if code = strings.ReplaceAll(code, "`", "'"); strings.TrimSpace(code) == "" {
		return "", end + n - i
	}
	return "`" + escape(code) + "`", end + n - i
}

// refOrLink converts a [[ref:id]] citation or a [text](url) link at the
// start of s.
func (c *converter) refOrLink(s string) (string, int, bool) {
	if m := reRefID.FindStringSubmatch(s); m != nil {
		return c.refLink(m[1]), len(m[0]), true
	}
	if text, dest, n, ok := parseLink(s); ok {
		return link(dest, c.labelText(text)), n, true
	}
	return "", 0, false
}

// image converts an ![alt](url) image at the start of s to a link labelled
// with its alt text ("image" when it has none).
func image(s string) (string, int, bool) {
	if len(s) < 2 || s[1] != '[' {
		return "", 0, false
	}
	text, dest, n, ok := parseLink(s[1:])
	if !ok {
		return "", 0, false
	}
	alt := strings.TrimSpace(text)
	if alt == "" {
		alt = "image"
	}
	return link(dest, escape(alt)), 1 + n, true
}

// autolinkOrMention converts an <https://...> autolink at the start of s,
// or keeps a user or channel mention (<@U123>, <#C123>) as it is.
func autolinkOrMention(s string) (string, int, bool) {
	if m := reAutolink.FindStringSubmatch(s); m != nil {
		return link(m[1], ""), len(m[0]), true
	}
	if m := reMention.FindString(s); m != "" {
		return m, len(m), true
	}
	return "", 0, false
}

// emphasis converts the delimiter run at s[i] with its closing run, if it has one.
func (c *converter) emphasis(s string, i int, bold bool) (string, int, bool) {
	ch := s[i]
	n := run(s, i, ch)
	if ch == '~' && n > 2 || n > 3 {
		return "", 0, false
	}
	open := i + n
	if open >= len(s) || isSpace(s[open]) {
		return "", 0, false
	}
	if ch == '_' && i > 0 && isWord(s[i-1]) {
		return "", 0, false // snake_case is not emphasis
	}
	for j := open + 1; j < len(s); j++ {
		if s[j] == '`' { // do not look for a closer inside a code span
			m := run(s, j, '`')
			if end := findRun(s, j+m, '`', m); end >= 0 {
				j = end + m - 1
				continue
			}
		}
		if s[j] != ch {
			continue
		}
		m := run(s, j, ch)
		if m != n || isSpace(s[j-1]) || ch == '_' && j+m < len(s) && isWord(s[j+m]) {
			j += m - 1
			continue
		}
		inner := s[open:j]
		var out string
		switch {
		case ch == '~':
			out = "~" + c.inline(inner, bold) + "~"
		case n == 1:
			out = "_" + c.inline(inner, bold) + "_"
		case n == 2 && bold:
			out = c.inline(inner, true)
		case n == 2:
			out = "*" + c.inline(inner, true) + "*"
		case bold:
			out = "_" + c.inline(inner, true) + "_"
		default:
			out = "*_" + c.inline(inner, true) + "_*"
		}
		return out, j + m - i, true
	}
	return "", 0, false
}

func (c *converter) refLink(id string) string {
	label := escape("ref:" + id)
	if c.ref != nil {
		if u := c.ref(id); safeURL(u) {
			return link(u, label)
		}
	}
	return "[" + label + "]"
}

// labelText converts a link's text: emphasis but no bold (the label is
// plain enough to read), and no nested links.
func (c *converter) labelText(text string) string {
	c.label = true
	defer func() { c.label = false }()
	return c.inline(strings.TrimSpace(text), true)
}

// parseLink reads "[text](dest "title")" at the start of s and returns the
// text, the destination and the length consumed.
func parseLink(s string) (text, dest string, n int, ok bool) {
	closeAt := matching(s, '[', ']', 0)
	if closeAt < 0 || closeAt+1 >= len(s) || s[closeAt+1] != '(' {
		return "", "", 0, false
	}
	text = s[1:closeAt]
	rest := s[closeAt+2:]
	end := matching(rest, '(', ')', 1)
	if end < 0 {
		return "", "", 0, false
	}
	inner := strings.TrimSpace(rest[:end])
	if strings.HasPrefix(inner, "<") {
		if k := strings.IndexByte(inner, '>'); k > 0 {
			inner = inner[1:k]
		}
	} else if k := strings.IndexAny(inner, " \t"); k >= 0 {
		inner = inner[:k] // drop the title
	}
	return text, inner, closeAt + 2 + end + 1, true
}

// matching returns the index in s of the close that brings depth (the
// opens already read) to zero, skipping backslash escapes, or -1.
func matching(s string, open, close byte, depth int) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// link renders <url|label> for a safe absolute URL; for anything else only the
// label (or, without one, the escaped URL text).
func link(dest, label string) string {
	if !safeURL(dest) {
		if label != "" {
			return label
		}
		return escape(dest)
	}
	href := linkEscaper.Replace(dest)
	if label == "" || label == escape(dest) {
		return "<" + href + ">"
	}
	return "<" + href + "|" + label + ">"
}

// safeURL reports whether dest is an absolute http(s) URL with a host or a mailto: URL.
func safeURL(dest string) bool {
	u, err := url.Parse(dest)
	if err != nil {
		return false
	}
	return (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" || u.Scheme == "mailto" && u.Opaque != ""
}

var linkEscaper = strings.NewReplacer("&", "&amp;", "<", "%3C", ">", "%3E", "|", "%7C", " ", "%20", "\t", "%09", "\n", "%0A")

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Escape applies Slack's three mandatory escapes (&, <, >) to plain text, so
// it can never mention @channel or inject a link. Mrkdwn applies them to
// Markdown; Escape is for text that is not Markdown (a target, a reason).
func Escape(s string) string { return escaper.Replace(s) }

func escape(s string) string { return Escape(s) }

func run(s string, i int, ch byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == ch {
		n++
	}
	return n
}

// findRun returns the index of the next run of exactly n ch at or after i, or -1.
func findRun(s string, i int, ch byte, n int) int {
	for i < len(s) {
		k := strings.IndexByte(s[i:], ch)
		if k < 0 {
			return -1
		}
		k += i
		m := run(s, k, ch)
		if m == n {
			return k
		}
		i = k + m
	}
	return -1
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' }

func isWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

func isASCIIPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}
