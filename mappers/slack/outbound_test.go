package slack_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"

	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/mapperstest"
	"github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/secret"
)

func obRefs(id string) string {
	if id == "mem-42" {
		return "https://relay.example.com/refs/mem-42"
	}
	return ""
}

// TestMrkdwnGolden converts every testdata/outbound/*.md and compares it with
// the .mrkdwn beside it (go test -run TestMrkdwnGolden -update rewrites them).
func TestMrkdwnGolden(t *testing.T) {
	t.Parallel()
	for _, md := range mapperstest.Payloads(t, filepath.Join("testdata", "outbound", "*.md")) {
		t.Run(md.Name, func(t *testing.T) {
			t.Parallel()
			got := slack.Mrkdwn(string(md.Body), obRefs) + "\n"
			mapperstest.Golden(t, strings.TrimSuffix(md.Path, ".md")+".mrkdwn", []byte(got))
			obCheckEscaped(t, got)
		})
	}
}

func TestMrkdwn(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"bold", "**a** and __b__", "*a* and *b*"},
		{"italic", "*a* and _b_", "_a_ and _b_"},
		{"bold italic", "***a***", "*_a_*"},
		{"strike", "~~gone~~", "~gone~"},
		{"intraword underscore", "snake_case_name", "snake_case_name"},
		{"lonely stars", "2 * 3 * 4", "2 * 3 * 4"},
		{"heading", "## Steps to **fix**", "*Steps to fix*"},
		{"empty heading", "#", ""},
		{"link", "[docs](https://x.io/a?b=1&c=2)", "<https://x.io/a?b=1&amp;c=2|docs>"},
		{"link with title", `[docs](https://x.io "Docs")`, "<https://x.io|docs>"},
		{"link with pipe in url", "[x](https://x.io/a|b)", "<https://x.io/a%7Cb|x>"},
		{"unsafe link", "[x](javascript:alert(1))", "x"},
		{"autolink", "<https://x.io>", "<https://x.io>"},
		{"special mention escaped", "<!channel> <!here>", "&lt;!channel&gt; &lt;!here&gt;"},
		{"user mention kept", "<@U12345>", "<@U12345>"},
		{"escapes", "a < b & c > d", "a &lt; b &amp; c &gt; d"},
		{"entity is text", "&amp;", "&amp;amp;"},
		{"backslash", `\*x\*`, "*x*"},
		{"code", "`a <b> *c*`", "`a &lt;b&gt; *c*`"},
		{"double backtick code", "``a ` b``", "`a ' b`"},
		{"bullets", "- a\n  - b\n    - c", "• a\n    • b\n        • c"},
		{"ordered", "1. a\n2. b", "1. a\n2. b"},
		{"task", "- [ ] todo\n- [x] done", "• ☐ todo\n• ☑ done"},
		{"quote", "> quoted **text**", "> quoted *text*"},
		{"link text formatting", "[**see** <https://a.io> [x](https://b.io)](https://c.io)", "<https://c.io|see &lt;https://a.io&gt; [x](https://b.io)>"},
		{"backticks in code block", "```\na ``` b\n```", "```\na ``\u200b` b\n```"},
		{"rule", "***", "──────────"},
		{"fence", "```js\nlet a = 1 < 2;\n```", "```\nlet a = 1 &lt; 2;\n```"},
		{"unclosed fence", "```\ncode", "```\ncode\n```"},
		{"ref resolved", "see [[ref:mem-42]]", "see <https://relay.example.com/refs/mem-42|ref:mem-42>"},
		{"ref unresolved", "see [[ref:x]]", "see [ref:x]"},
		{"crlf", "a\r\nb", "a\nb"},
		{"unicode", "**héllo** 🎉", "*héllo* 🎉"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := slack.Mrkdwn(tc.in, obRefs); got != tc.want {
				t.Errorf("Mrkdwn(%q): got %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// obCheckEscaped fails when s has a '<' that does not open a complete <...>
// on its line, or an '&' that is not one of Slack's three entities.
func obCheckEscaped(t testing.TB, s string) {
	t.Helper()
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<':
			end := strings.IndexAny(s[i+1:], "<>\n")
			if end < 0 || s[i+1+end] != '>' {
				t.Fatalf("unbalanced '<' at %d in %q", i, s)
			}
		case '&':
			rest := s[i:]
			if !strings.HasPrefix(rest, "&amp;") && !strings.HasPrefix(rest, "&lt;") && !strings.HasPrefix(rest, "&gt;") {
				t.Fatalf("unescaped '&' at %d in %q", i, s)
			}
		}
	}
}

func TestSplitMrkdwn(t *testing.T) {
	t.Parallel()
	word := "lorem ipsum <https://example.com/x|a link> &amp; dolor "
	long := strings.Repeat(word, 200)
	code := "```\n" + strings.Repeat("line of code &lt;x&gt;\n", 300) + "```"
	cases := []struct {
		name  string
		in    string
		limit int
	}{
		{"short", "hello", 3000},
		{"one long line", long, 3000},
		{"paragraphs", strings.Repeat("para "+strings.Repeat("x", 400)+"\n\n", 30), 3000},
		{"code block", "intro\n" + code + "\noutro", 3000},
		{"tiny limit", "abc " + long, 100},
		{"no spaces", strings.Repeat("é", 5000), 3000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			parts := slack.SplitMrkdwn(tc.in, tc.limit)
			if len(parts) == 0 {
				t.Fatal("got no parts")
			}
			for i, p := range parts {
				if len(p) > tc.limit {
					t.Errorf("part %d: got %d bytes, want at most %d", i, len(p), tc.limit)
				}
				if !utf8.ValidString(p) {
					t.Errorf("part %d is not valid UTF-8", i)
				}
				if strings.Count(p, "```")%2 != 0 {
					t.Errorf("part %d has an unclosed code block: %q", i, p)
				}
				obCheckEscaped(t, p)
			}
			// Nothing is lost: the words come back in order.
			got := strings.Fields(strings.ReplaceAll(strings.Join(parts, " "), "```", " "))
			want := strings.Fields(strings.ReplaceAll(tc.in, "```", " "))
			if strings.Join(got, "") != strings.Join(want, "") {
				t.Errorf("text changed by splitting: got %d fields, want %d", len(got), len(want))
			}
		})
	}
}

func TestFormatPartsLimits(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := 0; b.Len() < 200_000; i++ {
		fmt.Fprintf(&b, "## Section %d\n\nSome **bold** text with a [link](https://example.com/%d) and more words to fill the line.\n\n", i, i)
	}
	parts := slack.FormatParts(b.String(), nil)
	if len(parts) < 5 {
		t.Fatalf("got %d parts for 200 kB, want at least 5", len(parts))
	}
	var all []string
	for i, p := range parts {
		if len(p.Blocks) == 0 || len(p.Blocks) > slack.MaxBlocks {
			t.Errorf("part %d: got %d blocks, want 1..%d", i, len(p.Blocks), slack.MaxBlocks)
		}
		if len(p.Text) > slack.MaxMessageText {
			t.Errorf("part %d: got %d bytes of text, want at most %d", i, len(p.Text), slack.MaxMessageText)
		}
		for j, blk := range p.Blocks {
			s, ok := blk.(*slackapi.SectionBlock)
			if !ok || s.Text == nil || s.Text.Type != slackapi.MarkdownType {
				t.Fatalf("part %d block %d: got %T, want a mrkdwn section", i, j, blk)
			}
			if len(s.Text.Text) > slack.MaxSectionText {
				t.Errorf("part %d block %d: got %d bytes, want at most %d", i, j, len(s.Text.Text), slack.MaxSectionText)
			}
			all = append(all, s.Text.Text)
		}
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{"*Section 0*", "*Section 1000*", "<https://example.com/1000|link>"} {
		if !strings.Contains(joined, want) {
			t.Errorf("got no %q in the parts", want)
		}
	}
	if strings.Index(joined, "*Section 10*") > strings.Index(joined, "*Section 11*") {
		t.Error("parts are out of order")
	}
	if got := slack.FormatParts("   \n", nil); len(got) != 0 {
		t.Errorf("got %d parts for blank text, want 0", len(got))
	}
}

// obSlack is a local Slack Web API: it records chat.postMessage, chat.update,
// chat.postEphemeral and views.open calls and answers conversations.replies
// and conversations.history from what was posted. fail, when set, answers a
// method instead.
type obSlack struct {
	mu    sync.Mutex
	posts []obCall
	seq   int
	fail  map[string]func(w http.ResponseWriter)
	token string
}

type obCall = map[string]string

func newObSlack(t *testing.T) (*obSlack, *httptest.Server) {
	s := &obSlack{fail: map[string]func(http.ResponseWriter){}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func (s *obSlack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = r.Header.Get("Authorization")
	if f := s.fail[method]; f != nil {
		f(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	var form obCall = obCall{"method": method}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var v map[string]any
		_ = json.NewDecoder(r.Body).Decode(&v)
		for k, x := range v {
			b, _ := json.Marshal(x)
			form[k] = string(b)
		}
	} else {
		_ = r.ParseForm()
		for k := range r.PostForm {
			form[k] = r.PostForm.Get(k)
		}
	}
	switch method {
	case "chat.postMessage", "chat.postEphemeral", "chat.update":
		s.seq++
		ts := fmt.Sprintf("1700000000.%06d", s.seq)
		if method == "chat.update" {
			ts = form["ts"]
		}
		form["ts"] = ts
		s.posts = append(s.posts, form)
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": form["channel"], "ts": ts, "message_ts": ts})
	case "views.open":
		s.posts = append(s.posts, form)
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "view": map[string]any{"id": "V0001"}})
	case "conversations.replies", "conversations.history":
		var msgs []map[string]any
		for _, p := range s.posts {
			if p["method"] != "chat.postMessage" || p["channel"] != form["channel"] {
				continue
			}
			if method == "conversations.replies" && p["thread_ts"] != form["ts"] {
				continue
			}
			m := map[string]any{"type": "message", "ts": p["ts"], "text": p["text"]}
			if md := p["metadata"]; md != "" && form["include_all_metadata"] == "1" {
				m["metadata"] = json.RawMessage(md)
			}
			msgs = append(msgs, m)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "messages": msgs, "has_more": false})
	default:
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "unknown_method"})
	}
}

func (s *obSlack) recorded() []obCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]obCall(nil), s.posts...)
}

func obPoster(t *testing.T, apiURL string) *slack.Poster {
	t.Helper()
	p, err := slack.NewPoster(slack.PosterConfig{Token: secret.New("xoxb-test-token"), APIURL: apiURL, RefLink: obRefs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPostMarkdown(t *testing.T) {
	t.Parallel()
	fake, srv := newObSlack(t)
	p := obPoster(t, srv.URL)
	long := strings.Repeat("A paragraph of the answer that is long enough to need splitting. ", 1500) // ~100 kB
	var seen []int
	res, err := p.PostMarkdown(t.Context(), "C1", "**Answer** with [[ref:mem-42]]\n\n"+long, slack.PostOptions{
		ThreadTS: "1699999999.000100", Key: "out:task-1",
		OnPart: func(i int, ts string) error { seen = append(seen, i); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	posts := fake.recorded()
	if len(posts) < 3 || len(res.TS) != len(posts) || res.Channel != "C1" {
		t.Fatalf("got %d posts and result %+v, want at least 3 and one ts each", len(posts), res)
	}
	for i, p := range posts {
		if p["thread_ts"] != "1699999999.000100" || p["channel"] != "C1" {
			t.Errorf("post %d: got channel %q thread %q, want C1 in the thread", i, p["channel"], p["thread_ts"])
		}
		var md slackapi.SlackMetadata
		if err := json.Unmarshal([]byte(p["metadata"]), &md); err != nil || md.EventType != slack.MetadataEventType ||
			md.EventPayload["key"] != "out:task-1" || md.EventPayload["part"] != float64(i) {
			t.Errorf("post %d: got metadata %q, want key out:task-1 part %d", i, p["metadata"], i)
		}
		if len(p["text"]) > slack.MaxMessageText {
			t.Errorf("post %d: got %d bytes of text", i, len(p["text"]))
		}
		if seen[i] != i {
			t.Errorf("OnPart: got %v, want parts in order", seen)
		}
	}
	if b := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(posts[0]["blocks"]); !strings.Contains(b, "<https://relay.example.com/refs/mem-42|ref:mem-42>") {
		t.Errorf("first post blocks lack the ref link: %.300s", posts[0]["blocks"])
	}
	if fake.token != "Bearer xoxb-test-token" && posts[0]["token"] != "xoxb-test-token" {
		t.Errorf("got Authorization %q, want the bot token", fake.token)
	}

	// Resuming after part 1 posts only the rest; FindPosted sees every part.
	found, err := p.FindPosted(t.Context(), "C1", "1699999999.000100", "out:task-1", time.Time{})
	if err != nil || len(found) != len(posts) {
		t.Fatalf("FindPosted: got %v, %v, want %d parts", found, err, len(posts))
	}
	res2, err := p.PostMarkdown(t.Context(), "C2", "x\n\n"+long, slack.PostOptions{Skip: 1, Key: "k2"})
	if err != nil || len(res2.TS) != len(posts)-1 {
		t.Fatalf("resumed post: got %+v, %v, want %d parts", res2, err, len(posts)-1)
	}
	if found, err := p.FindPosted(t.Context(), "C2", "", "k2", time.Unix(1, 0)); err != nil || len(found) != len(posts)-1 || found[0] != "" {
		t.Fatalf("FindPosted in channel history: got %v, %v", found, err)
	}
}

func TestPosterErrors(t *testing.T) {
	t.Parallel()
	answer := func(status int, body string, hdr ...string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			for i := 0; i+1 < len(hdr); i += 2 {
				w.Header().Set(hdr[i], hdr[i+1])
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}
	cases := []struct {
		name      string
		fail      func(http.ResponseWriter)
		permanent bool
		retry     time.Duration
		code      string
	}{
		{"rate limited", answer(429, `{"ok":false,"error":"ratelimited"}`, "Retry-After", "3"), false, 3 * time.Second, ""},
		{"invalid_auth", answer(200, `{"ok":false,"error":"invalid_auth"}`), true, 0, "invalid_auth"},
		{"channel_not_found", answer(200, `{"ok":false,"error":"channel_not_found"}`), true, 0, "channel_not_found"},
		{"internal_error", answer(200, `{"ok":false,"error":"internal_error"}`), false, 0, "internal_error"},
		{"server error", answer(502, `bad gateway`), false, 0, ""},
		{"not found", answer(404, `nope`), true, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake, srv := newObSlack(t)
			fake.fail["chat.postMessage"] = tc.fail
			_, err := obPoster(t, srv.URL).PostMarkdown(t.Context(), "C1", "hi", slack.PostOptions{})
			var pe *slack.PostError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v (%T), want a *slack.PostError", err, err)
			}
			if pe.Permanent() != tc.permanent || pe.RetryDelay() != tc.retry || pe.Code != tc.code || pe.Op != "chat.postMessage" {
				t.Fatalf("got permanent=%v retry=%s code=%q op=%q, want %v %s %q", pe.Permanent(), pe.RetryDelay(), pe.Code, pe.Op, tc.permanent, tc.retry, tc.code)
			}
		})
	}
	if _, err := slack.NewPoster(slack.PosterConfig{}); !errors.Is(err, slack.ErrNoToken) {
		t.Fatalf("got %v without a token, want ErrNoToken", err)
	}
}

func TestApprovalHelpers(t *testing.T) {
	t.Parallel()
	fake, srv := newObSlack(t)
	p := obPoster(t, srv.URL)
	ctx := t.Context()
	ch, ts, err := p.PostMessage(ctx, "C9", slackapi.MsgOptionText("suggestion", false))
	if err != nil || ch != "C9" || ts == "" {
		t.Fatalf("PostMessage: got %q %q %v", ch, ts, err)
	}
	if ch2, ts2, err := p.UpdateMessage(ctx, "C9", ts, slackapi.MsgOptionText("approved", false)); err != nil || ch2 != "C9" || ts2 != ts {
		t.Fatalf("UpdateMessage: got %q %q %v, want C9 %q", ch2, ts2, err, ts)
	}
	if ets, err := p.PostEphemeral(ctx, "C9", "U1", slackapi.MsgOptionText("not allowed", false)); err != nil || ets == "" {
		t.Fatalf("PostEphemeral: got %q %v", ets, err)
	}
	view := slackapi.ModalViewRequest{Type: slackapi.VTModal, Title: slackapi.NewTextBlockObject("plain_text", "Edit", false, false)}
	if id, err := p.OpenView(ctx, "trigger-1", view); err != nil || id != "V0001" {
		t.Fatalf("OpenView: got %q %v", id, err)
	}
	posts := fake.recorded()
	want := []string{"chat.postMessage", "chat.update", "chat.postEphemeral", "views.open"}
	if len(posts) != len(want) {
		t.Fatalf("got %d calls, want %d", len(posts), len(want))
	}
	for i, w := range want {
		if posts[i]["method"] != w {
			t.Errorf("call %d: got %s, want %s", i, posts[i]["method"], w)
		}
	}
	if posts[2]["user"] != "U1" || posts[3]["trigger_id"] != `"trigger-1"` {
		t.Errorf("got ephemeral user %q and trigger %q", posts[2]["user"], posts[3]["trigger_id"])
	}
	fake.fail["chat.update"] = func(w http.ResponseWriter) {
		_, _ = w.Write([]byte(`{"ok":false,"error":"message_not_found"}`))
	}
	var pe *slack.PostError
	if _, _, err := p.UpdateMessage(ctx, "C9", "1.2", slackapi.MsgOptionText("x", false)); !errors.As(err, &pe) || !pe.Permanent() || pe.Op != "chat.update" {
		t.Fatalf("got %v, want a permanent chat.update PostError", err)
	}
}

// FuzzMrkdwn: the converter never panics, keeps valid UTF-8 valid, always
// escapes (every '<' opens a complete <...>, every '&' is an entity), and its
// output splits into parts within Slack's limits.
func FuzzMrkdwn(f *testing.F) {
	for _, s := range []string{
		"**a** _b_ ~~c~~ `d` [e](https://f.io) <https://g.io> <@U123> [[ref:x]]",
		"# h\n- a\n  - b\n1. c\n> q\n```\ncode <x>\n```\n| a | b |\n|---|---|\n| 1 | 2 |",
		"***", "[", "![", "<", "&", "`", "``", "*_~", "[a](", "[a](<b>)", "\\", "[[ref:]]", "_a_b_", "x\n===",
	} {
		f.Add(s)
	}
	if files, _ := filepath.Glob(filepath.Join("testdata", "outbound", "*.md")); len(files) > 0 {
		for _, file := range files {
			b, _ := os.ReadFile(file)
			f.Add(string(b))
		}
	}
	f.Fuzz(func(t *testing.T, md string) {
		out := slack.Mrkdwn(md, func(id string) string { return "https://r.io/" + id })
		if utf8.ValidString(md) && !utf8.ValidString(out) {
			t.Fatalf("valid input %q gave invalid UTF-8 %q", md, out)
		}
		obCheckEscaped(t, out)
		for _, p := range slack.SplitMrkdwn(out, 200) {
			if len(p) > 200 {
				t.Fatalf("part of %d bytes, want at most 200", len(p))
			}
		}
	})
}

func ExampleMrkdwn() {
	fmt.Println(slack.Mrkdwn("## Fix\n**Restart** the `worker`, see [runbook](https://example.com/rb) and [[ref:doc-1]].\n- step one", func(id string) string {
		return "https://relay.example.com/refs/" + id
	}))
	// Output:
	// *Fix*
	// *Restart* the `worker`, see <https://example.com/rb|runbook> and <https://relay.example.com/refs/doc-1|ref:doc-1>.
	// • step one
}

func BenchmarkMrkdwn(b *testing.B) {
	in := testenv.ReadFile(b, filepath.Join("testdata", "outbound", "answer.md"))
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		slack.Mrkdwn(string(in), obRefs)
	}
}

// BenchmarkFormatParts formats a 100 kB answer into Slack messages.
func BenchmarkFormatParts(b *testing.B) {
	in := testenv.ReadFile(b, filepath.Join("testdata", "outbound", "answer.md"))
	long := strings.Repeat(string(in)+"\n\n", 100_000/len(in)+1)
	b.SetBytes(int64(len(long)))
	b.ReportAllocs()
	for b.Loop() {
		slack.FormatParts(long, obRefs)
	}
}
