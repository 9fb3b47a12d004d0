package deploytest

import (
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/relaystation/relay/internal/testenv"
)

// The README stays short and shows where to connect Slack and GitHub on its
// first screen (issue 38).
func TestREADMEShort(t *testing.T) {
	t.Parallel()
	readme := string(testenv.ReadFile(t, filepath.Join(root(t), "README.md")))
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines, want at most 250: move the detail to docs/", n)
	}
	lines := strings.Split(readme, "\n")
	first := strings.Join(lines[:min(60, len(lines))], "\n")
	for _, want := range []string{"Connect Slack", "Connect GitHub"} {
		if !strings.Contains(first, want) {
			t.Errorf("README.md: %q is not within the first 60 lines", want)
		}
	}
}

// .ci/run runs the README's test command: every flag the README gives is on
// CI's go test line, and both test ./....
func TestCIRunsREADMETestCommand(t *testing.T) {
	t.Parallel()
	readme := string(testenv.ReadFile(t, filepath.Join(root(t), "README.md")))
	ci := string(testenv.ReadFile(t, filepath.Join(root(t), ".ci", "run")))
	cmd := goTestLine(readme)
	if cmd == nil {
		t.Fatal("README.md gives no `go test` command")
	}
	ciCmd := goTestLine(ci)
	if ciCmd == nil {
		t.Fatal(".ci/run runs no `go test` command")
	}
	has := map[string]bool{}
	for _, a := range ciCmd {
		has[a] = true
	}
	for _, a := range cmd {
		if !has[a] {
			t.Errorf(".ci/run's %q lacks %q of the README's test command", strings.Join(ciCmd, " "), a)
		}
	}
}

// goTestLine returns the words of the first line that starts with "go test",
// up to a comment.
func goTestLine(text string) []string {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "go test ") {
			continue
		}
		line, _, _ = strings.Cut(line, "#")
		return strings.Fields(line)
	}
	return nil
}

// Every relative link of README.md and docs/*.md names a file that exists, and
// every #anchor a heading of the page it points at.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	r := root(t)
	pages, err := filepath.Glob(filepath.Join(r, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(r, "README.md"))
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a
	}
	checked := 0
	for _, page := range pages {
		rel, _ := filepath.Rel(r, page)
		for _, l := range markdownLinks(string(testenv.ReadFile(t, page))) {
			target, frag, _ := strings.Cut(l.target, "#")
			dest := page
			if target != "" {
				dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", rel, l.line, l.target)
					continue
				}
			}
			checked++
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if !anchorsOf(dest)[frag] {
				t.Errorf("%s:%d: link to %s: no heading with anchor #%s", rel, l.line, l.target, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked: is the link parser broken?", checked)
	}
}

func TestHeadingAnchors(t *testing.T) {
	t.Parallel()
	a := headingAnchors("# relay station\n## Webhook gateway (`relay ingest`)\n```sh\n# not a heading\n```\n" +
		"### Request/reply services\n## Faults\n## Faults\n#### Bundles: `relay mcp install`, `uninstall`, `bundles`\n")
	for _, want := range []string{"relay-station", "webhook-gateway-relay-ingest", "requestreply-services", "faults",
		"faults-1", "bundles-relay-mcp-install-uninstall-bundles"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a comment in a code block made an anchor")
	}
	ls := markdownLinks("see [a](x.md#b) and `[c](y.md)`\n```\n[d](z.md)\n```\n[e](https://example.com) [f](#g)\n")
	if len(ls) != 2 || ls[0].target != "x.md#b" || ls[1].target != "#g" || ls[1].line != 5 {
		t.Errorf("links = %+v", ls)
	}
}

type mdLink struct {
	target string
	line   int
}

var (
	linkRE       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownLinks returns the relative link targets outside code blocks and
// code spans (URLs with a scheme are left out).
func markdownLinks(text string) []mdLink {
	var out []mdLink
	for i, line := range proseLines(text) {
		line = inlineCodeRE.ReplaceAllString(line, "")
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if schemeRE.MatchString(target) {
				continue
			}
			out = append(out, mdLink{target: target, line: i + 1})
		}
	}
	return out
}

// proseLines yields the lines of a Markdown text outside fenced code
// blocks, with their index.
func proseLines(text string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		fence := ""
		for i, line := range strings.Split(text, "\n") {
			if f := fenceOf(line); f != "" {
				if fence == "" {
					fence = f
				} else if strings.TrimSpace(line) == fence {
					fence = ""
				}
				continue
			}
			if fence == "" && !yield(i, line) {
				return
			}
		}
	}
}

func fenceOf(line string) string {
	t := strings.TrimLeft(line, " ")
	n := 0
	for n < len(t) && t[n] == '`' {
		n++
	}
	if n >= 3 {
		return t[:n]
	}
	return ""
}

// headingAnchors returns the anchors GitHub gives a page's headings:
// lower case, punctuation dropped, spaces as hyphens, repeats numbered.
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
