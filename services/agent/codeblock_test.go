package agent

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
)

func TestFindCodeBlocks(t *testing.T) {
	t.Parallel()
	servers := []string{"everything", "github"}
	tests := []struct {
		name, text string
		want       []CodeBlock
	}{
		{"named server", "hi ```everything\ntool: echo\nmessage: x\n``` bye", []CodeBlock{{"everything", "tool: echo\nmessage: x\n"}}},
		{"closing fence on the last line (Slack)", "```github\ntool: get_issue```", []CodeBlock{{"github", "tool: get_issue"}}},
		{"no info string", "```\ntool: echo\n```", []CodeBlock{{"", "tool: echo\n"}}},
		{"one line", "```tool: echo```", []CodeBlock{{"", "tool: echo"}}},
		{"unknown server with a tool line", "```jira\ntool: search\n```", []CodeBlock{{"jira", "tool: search\n"}}},
		{"a language, not a server", "```go\nfunc main() {}\n```", nil},
		{"a quoted log without tool", "```\npanic: boom\n```", nil},
		{"Slack escaping", "```everything\ntool: echo\nmessage: a &lt;b&gt; &amp;\n```", []CodeBlock{{"everything", "tool: echo\nmessage: a <b> &\n"}}},
		{"unclosed", "```everything\ntool: echo", nil},
		{"two blocks", "```everything\ntool: echo\n``` and ```github\ntool: x\n```", []CodeBlock{{"everything", "tool: echo\n"}, {"github", "tool: x\n"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := FindCodeBlocks(tt.text, servers)
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("block %d: got %q, want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseCodeBlock(t *testing.T) {
	t.Parallel()
	run, err := ParseCodeBlock(CodeBlock{Body: "tool: get-sum\na: 2\nb: 40.5\ndisplay: block\nwhen: 2026-01-02\n"}, "everything")
	if err != nil {
		t.Fatal(err)
	}
	if run.Name() != "everything.get-sum" || run.Display != DisplayBlock || run.Args["a"] != float64(2) || run.Args["when"] != "2026-01-02T00:00:00Z" {
		t.Errorf("got %+v, want everything.get-sum with JSON arguments, display block", run)
	}
	for _, tt := range []struct{ body, want string }{
		{"message: hi\n", "`tool:` must name"},
		{"tool: echo\ndisplay: huge\n", `display "huge"`},
		{"tool: [echo\n", "not YAML"},
		{"- tool\n", "not YAML"},
	} {
		if _, err := ParseCodeBlock(CodeBlock{Server: "everything", Body: tt.body}, ""); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("body %q: got %v, want an error containing %q", tt.body, err, tt.want)
		}
	}
}

func FuzzFindCodeBlocks(f *testing.F) {
	f.Add("```everything\ntool: echo\nmessage: x\n```")
	f.Add("```\ntool: a```b```c\n```")
	f.Add("&lt;```tool: x```&amp;")
	f.Fuzz(func(t *testing.T, text string) {
		for _, b := range FindCodeBlocks(text, []string{"everything"}) {
			if strings.Contains(b.Body, "```") {
				t.Fatalf("block body %q holds a fence", b.Body)
			}
			run, err := ParseCodeBlock(b, "everything")
			if err == nil && (run.Tool == "" || run.Server == "") {
				t.Fatalf("accepted a run without tool or server: %+v", run)
			}
		}
	})
}

func TestRenderResult(t *testing.T) {
	t.Parallel()
	slackRun := func(display string) runState {
		return runState{Run: ToolRun{Server: "everything", Tool: "echo", Display: display}, Target: &envelope.Target{Channel: "slack", SlackCh: "C1"}}
	}
	github := slackRun("")
	github.Target = &envelope.Target{Channel: "github", Owner: "o", Repo: "r", Number: 1}
	text := func(s string) map[string]any {
		return map[string]any{"status": "success", "content": []any{map[string]any{"type": "text", "text": s}}}
	}
	long := strings.Repeat("line\n", 200)
	image := map[string]any{"status": "success", "content": []any{map[string]any{"type": "image", "mimeType": "image/png", "data": "iVBORw=="}}}
	tests := []struct {
		name   string
		st     runState
		res    map[string]any
		want   []string
		files  int
		noWant string
	}{
		{"text", slackRun(""), text("Echo: *hi*"), []string{"`everything.echo`:\nEcho: *hi*"}, 0, "```"},
		{"display block", slackRun(DisplayBlock), text("Echo: hi"), []string{"```\nEcho: hi\n```"}, 0, ""},
		{"JSON text", slackRun(""), text(`{"a":1}`), []string{"```json\n{\n  \"a\": 1\n}\n```"}, 0, ""},
		{"structured only", slackRun(""), map[string]any{"status": "success", "structured": map[string]any{"t": 36.0}}, []string{"```json", `"t": 36`}, 0, ""},
		{"resource link", slackRun(""), map[string]any{"status": "success", "content": []any{map[string]any{"type": "resource_link", "uri": "https://x/r", "name": "R"}}}, []string{"[R](https://x/r)"}, 0, ""},
		{"display collapsed", slackRun(DisplayCollapsed), text("short"), []string{"returned 1 lines", "full output attached"}, 1, ""},
		{"long in Slack", slackRun(""), text(long), []string{"returned 201 lines, 1000 characters"}, 1, "line\nline"},
		{"long on GitHub", github, text(long), []string{"<details><summary>Full output</summary>", "line\nline"}, 0, ""},
		{"timeout", slackRun(""), map[string]any{"status": "timeout", "duration_ms": 30012.5, "error": "deadline"}, []string{"timed out after 30 s"}, 0, ""},
		{"failure", slackRun(""), map[string]any{"status": "error", "error": "server everything is offline"}, []string{":x: `everything.echo` failed (error): server everything is offline"}, 0, ""},
		{"cancelled in Slack", slackRun(""), map[string]any{"status": "cancelled", "cancelled_by": "slack:U0ALICE", "error": "cancelled"}, []string{":octagonal_sign: `everything.echo` was cancelled by <@U0ALICE>."}, 0, "failed"},
		{"cancelled on GitHub", github, map[string]any{"status": "cancelled", "cancelled_by": "cli:alice"}, []string{"`everything.echo` was cancelled by cli:alice."}, 0, "failed"},
		{"image in Slack", slackRun(""), image, []string{"_(image attached: image.png)_"}, 1, ""},
		{"image on GitHub", github, image, []string{"_(an image/png image of 4 bytes, not shown: a GitHub comment cannot carry a file)_"}, 0, "attached"},
		{"image collapsed in Slack", slackRun(DisplayCollapsed), image, []string{"full output attached"}, 2, ""},
		{"nothing", slackRun(""), map[string]any{"status": "success"}, []string{"_(no output)_"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := renderResult(tt.st, tt.res, 500)
			wantParts(t, r.text, tt.want)
			if len(r.files) != tt.files {
				t.Errorf("got %d files, want %d", len(r.files), tt.files)
			}
			if tt.noWant != "" && strings.Contains(r.text, tt.noWant) {
				t.Errorf("got %q, want no %q in it", r.text, tt.noWant)
			}
		})
	}
}

// GitHub refuses a comment over 65,536 characters: a huge output is cut in
// its fold, and the comment says so.
func TestRenderResultFitsGitHubComment(t *testing.T) {
	t.Parallel()
	st := runState{Run: ToolRun{Server: "everything", Tool: "echo"}, Target: &envelope.Target{Channel: "github", Owner: "o", Repo: "r", Number: 1}}
	res := map[string]any{"status": "success", "content": []any{map[string]any{"type": "text", "text": strings.Repeat("é", 70000)}}}
	r := renderResult(st, res, 500)
	if n := utf8.RuneCountInString(r.text); n > maxGitHubComment {
		t.Errorf("got a comment of %d characters, want at most %d", n, maxGitHubComment)
	}
	wantParts(t, r.text, []string{"returned 1 lines, 70000 characters", "</details>", "characters more not shown"})
}

// A result shown in place of the running message keeps all its text: the
// update splits it into section blocks of at most 3,000 characters (Slack's
// limit) rather than cutting it, and one too long for one message is
// collapsed to a summary with the full text attached.
func TestRunUpdateKeepsLongText(t *testing.T) {
	t.Parallel()
	st := runState{Run: ToolRun{Server: "everything", Tool: "echo"}, Target: &envelope.Target{Channel: "slack", SlackCh: "C1"}, MessageTS: "1.2"}
	text := func(s string) map[string]any {
		return map[string]any{"status": "success", "content": []any{map[string]any{"type": "text", "text": s}}}
	}
	out := strings.Repeat("word ", 1500) + "END"
	r, part := runUpdate(st, text(out), 10000)
	if len(part.Blocks) < 3 || !strings.Contains(part.Text, "END") || len(r.files) != 0 {
		t.Errorf("7,500 characters under a 10,000 limit: got %d blocks, %d files, END shown %t; want 3 or more blocks, all the text, no file",
			len(part.Blocks), len(r.files), strings.Contains(part.Text, "END"))
	}
	huge := strings.Repeat("ü", 39000)
	r, part = runUpdate(st, text(huge), 40000)
	if len(r.files) != 1 || !strings.Contains(part.Text, "full output attached") {
		t.Errorf("78,000 bytes: got %d files and %q, want the summary with the full text attached", len(r.files), clip.To(part.Text, 200))
	}
}
