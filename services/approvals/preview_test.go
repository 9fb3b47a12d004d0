package approvals

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/relaystation/relay/envelope"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools"
)

// previewTexts returns the texts of the message's answer sections: the
// blocks between the context block and the first block after the answer.
func previewTexts(t *testing.T, text string, ref slackmapper.RefLinker) []string {
	t.Helper()
	r := &Record{TaskID: "t", Round: 1, Status: StatusPending, Text: text, Target: envelope.Target{Channel: "github", Owner: "o", Repo: "r", Number: 1}}
	blocks, _ := message(r, ref)
	var out []string
	for _, b := range blocks[2:] { // head section, context
		s, ok := b.(*slack.SectionBlock)
		if !ok {
			break
		}
		out = append(out, s.Text.Text)
	}
	return out
}

// wellFormed fails when a section text is over Slack's limit, cuts a UTF-8
// character or leaves an entity or a link unfinished at either end.
func wellFormed(t *testing.T, parts []string) {
	t.Helper()
	for i, p := range parts {
		if len(p) > maxSectionText {
			t.Errorf("section %d is %d bytes, Slack allows %d", i, len(p), maxSectionText)
		}
		if !utf8.ValidString(p) {
			t.Errorf("section %d cuts a UTF-8 character: %q", i, p[max(0, len(p)-8):])
		}
		for j := strings.IndexByte(p, '&'); j >= 0; j = next(p, j) {
			if !strings.HasPrefix(p[j:], "&amp;") && !strings.HasPrefix(p[j:], "&lt;") && !strings.HasPrefix(p[j:], "&gt;") {
				t.Errorf("section %d holds a cut entity at %d: %q", i, j, p[j:min(len(p), j+6)])
			}
		}
		if strings.Count(p, "<") != strings.Count(p, ">") {
			t.Errorf("section %d holds a cut link: %q", i, p)
		}
	}
}

func next(s string, i int) int {
	if j := strings.IndexByte(s[i+1:], '&'); j >= 0 {
		return i + 1 + j
	}
	return -1
}

// TestPreviewIsWhatIsPosted: the approval message shows the answer as
// outbound posts it to Slack (Markdown converted to mrkdwn, citations linked),
// not the raw Markdown the model wrote.
func TestPreviewIsWhatIsPosted(t *testing.T) {
	t.Parallel()
	ref := func(id string) string { return "https://docs.example/" + id }
	text := "## Fix\n\n**Upgrade** to __v1.2__, see the [release notes](https://example.com/notes?a=1&b=2) & *why* [[ref:doc-1]].\n\n- one\n- two <!channel>"
	got := previewTexts(t, text, ref)
	want := slackmapper.Sections(text, ref)
	if strings.Join(got, "\n---\n") != strings.Join(want, "\n---\n") {
		t.Fatalf("preview:\n%q\nwant the sections outbound posts:\n%q", got, want)
	}
	joined := strings.Join(got, "\n")
	for _, s := range []string{"*Fix*", "*Upgrade*", "*v1.2*", "<https://example.com/notes?a=1&amp;b=2|release notes>", " &amp; ", "_why_",
		"<https://docs.example/doc-1|ref:doc-1>", "• one", "&lt;!channel&gt;"} {
		if !strings.Contains(joined, s) {
			t.Errorf("preview %q lacks %q", joined, s)
		}
	}
	for _, s := range []string{"**", "__", "## ", "](", "[[ref:", "<!channel>"} {
		if strings.Contains(joined, s) {
			t.Errorf("preview %q still shows Markdown %q", joined, s)
		}
	}
	if got := previewTexts(t, "see [[ref:doc-1]]", nil); len(got) != 1 || got[0] != "see [ref:doc-1]" {
		t.Errorf("without a resolver got %q, want the citation as text", got)
	}
	if got := previewTexts(t, " \n ", nil); len(got) != 1 || got[0] != "_(empty)_" {
		t.Errorf("blank answer: got %q, want _(empty)_", got)
	}
}

// TestPreviewSplitsSafely: long answers are split where the post splits them,
// never inside an &amp; (the old preview escaped, then cut at 3000 bytes), a
// link or a UTF-8 character, and nothing is lost.
func TestPreviewSplitsSafely(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		// escaped, the & sits at byte 2998: a cut at 3000 split "&amp;" in two.
		"entity at the limit":    strings.Repeat("a", 2998) + "&b" + strings.Repeat("c", 100),
		"entities everywhere":    strings.Repeat("x&<>", 2000),
		"character at the limit": strings.Repeat("a", 2999) + "é€😀" + strings.Repeat("ü", 2000),
		"link at the limit":      strings.Repeat("a", 2990) + " [a link](https://example.com/" + strings.Repeat("p", 40) + ") tail",
		"bold words":             strings.Repeat("**bold** & plain ", 1000),
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			parts := previewTexts(t, text, nil)
			if len(parts) < 2 {
				t.Fatalf("got %d sections, want the text split", len(parts))
			}
			wellFormed(t, parts)
			if strings.Join(parts, "") != strings.Join(slackmapper.Sections(text, nil), "") {
				t.Errorf("preview differs from the posted sections")
			}
			if name == "entity at the limit" || name == "entities everywhere" || name == "character at the limit" {
				// No spaces or line breaks to split at: the sections join to the whole text.
				if whole := slackmapper.Mrkdwn(text, nil); strings.Join(parts, "") != whole {
					t.Errorf("sections lost text: got %d bytes, want %d", len(strings.Join(parts, "")), len(whole))
				}
			}
		})
	}
}

// TestLongStateLineKeepsEntities: a rejection reason long enough to be cut is
// cut between words, not inside an entity.
func TestLongStateLineKeepsEntities(t *testing.T) {
	t.Parallel()
	r := &Record{TaskID: "t", Round: 1, Status: StatusRejected, DecidedBy: "U0BOSS01", Text: "x",
		Reason: strings.Repeat("a&b ", 1000), Target: envelope.Target{Channel: "github"}}
	blocks, _ := message(r, nil)
	last := blocks[len(blocks)-1].(*slack.SectionBlock).Text.Text
	if !strings.HasPrefix(last, ":x: *Rejected*") {
		t.Fatalf("last block %q, want the state line", last)
	}
	wellFormed(t, []string{last})
}

// BenchmarkPreview renders the approval message of an 8 KiB Markdown answer
// (headings, bold, links, lists, code): Mrkdwn and SplitMrkdwn, as the post.
func BenchmarkPreview(b *testing.B) {
	para := "## Cause\n\nThe **cache** was keyed by `user` only, see [the report](https://example.com/r?id=1&x=2) & [[ref:doc-1]].\n\n- one\n- two\n\n```go\nkey := user + \":\" + org\n```\n\n"
	text := strings.Repeat(para, 8<<10/len(para))
	r := &Record{TaskID: "t", Round: 1, Status: StatusPending, Text: text, Target: envelope.Target{Channel: "github", Owner: "o", Repo: "r", Number: 1}}
	ref := func(id string) string { return "https://docs.example/" + id }
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		message(r, ref)
	}
}

// TestQuestionTextIsEscaped: an MCP server's question is shown as the relay
// shows every text in Slack: it cannot mention @channel or inject a link, and
// a long one is cut between words, never inside an entity.
func TestQuestionTextIsEscaped(t *testing.T) {
	t.Parallel()
	q := &question{Q: tools.Question{ID: "q1", Server: "srv", Tool: "deploy",
		Message: "Deploy **now**? <!channel> <https://evil.example|click> & " + strings.Repeat("a&b ", 1000)}, Status: elicitPending}
	blocks, fallback := questionMessage(q)
	text := blocks[0].(*slack.SectionBlock).Text.Text
	form := questionForm(q).Blocks.BlockSet[0].(*slack.SectionBlock).Text.Text
	for _, s := range []string{text, form, fallback} {
		if strings.Contains(s, "<!channel>") || strings.Contains(s, "<https://evil") {
			t.Errorf("server text reaches Slack unescaped: %q", s[:min(len(s), 120)])
		}
	}
	if !strings.Contains(text, "*now*") || !strings.Contains(text, "&lt;!channel&gt;") {
		t.Errorf("question %q: want Markdown converted and the mention escaped", text[:min(len(text), 120)])
	}
	wellFormed(t, []string{text, form})
	unescaped := strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">").Replace(fallback)
	if n := utf8.RuneCountInString(strings.TrimPrefix(unescaped, "srv.deploy asks: ")); n != 200 {
		t.Errorf("fallback question of %d characters, want it cut to 200", n)
	}
}
