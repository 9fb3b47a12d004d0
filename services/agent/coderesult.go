package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools"
)

// DefaultLongOutput is how many characters of output a run shows before it
// is collapsed to a summary line (the full text attached as a file in Slack,
// folded in a <details> on GitHub).
const DefaultLongOutput = 2500

// maxGitHubComment is the most characters GitHub takes in a comment; a
// longer one is refused (422). githubFold is how much of a run's output a
// comment folds, leaving room for the summary and the idempotency marker.
const (
	maxGitHubComment = 65536
	githubFold       = 60000
)

// runStateOf reads meta.agent.code_run of a tool answer.
func runStateOf(e *envelope.Envelope) (runState, bool) {
	var a struct {
		Run *runState `json:"code_run"`
	}
	if ok, err := e.Meta.Decode("agent", &a); !ok || err != nil || a.Run == nil || a.Run.Target == nil {
		return runState{}, false
	}
	return *a.Run, e.ToolCall != nil && e.ToolCall.Result != nil
}

// handleRunResult posts a run's result, or its refusal, to its thread.
func (s *Service) handleRunResult(ctx context.Context, e *envelope.Envelope, st runState) error {
	res := e.ToolCall.Result
	key := "run-result:" + st.Origin
	if st.Refused {
		return s.refuse(ctx, st, key)
	}
	r, part := runUpdate(st, res, s.cfg.LongOutput)
	if st.MessageTS != "" && s.cfg.Slack != nil {
		// No status update of the running message may land after the
		// result's (runprogress.go).
		if err := s.runMessageDone(ctx, st); err != nil {
			return err
		}
	}
	if s.cfg.Slack != nil && st.Target.Channel == string(envelope.ChannelSlack) {
		for _, f := range r.files {
			if err := s.uploadRunFile(ctx, st, f); err != nil {
				s.log.Warn("run file not uploaded to Slack; only the text is posted", "origin", st.Origin, "file", f.name, "err", err)
			}
		}
	}
	if st.MessageTS != "" && s.cfg.Slack != nil {
		_, _, _, err := s.cfg.Slack.UpdateMessageContext(ctx, st.Target.SlackCh, st.MessageTS, slack.MsgOptionText(part.Text, false),
			slack.MsgOptionBlocks(part.Blocks...))
		if err == nil {
			return nil
		}
		s.log.Warn("running message not updated; posting the result as a new message", "origin", st.Origin, "err", slackmapper.Classify("chat.update", err))
	}
	return s.postRun(ctx, st, key, r.text)
}

// runUpdate renders a result and, for Slack, the message that replaces the
// running one: the text in section blocks within Slack's limits (3,000
// characters each, 50 blocks, 40,000 characters), never cut; a text that
// does not fit one message is collapsed to its summary with the full text
// attached.
func runUpdate(st runState, res map[string]any, long int) (rendered, slackmapper.PostPart) {
	r := renderResult(st, res, long)
	if st.Target.Channel != string(envelope.ChannelSlack) {
		return r, slackmapper.PostPart{}
	}
	parts := slackmapper.FormatParts(r.text, nil)
	if len(parts) > 1 {
		st.Run.Display = DisplayCollapsed
		r = renderResult(st, res, long)
		parts = slackmapper.FormatParts(r.text, nil)
	}
	if len(parts) == 0 {
		return r, slackmapper.PostPart{}
	}
	return r, parts[0]
}

// refuse tells a person without a role that they cannot run tools: an
// ephemeral message in Slack (in the thread when no Slack client is
// configured), a comment on GitHub.
func (s *Service) refuse(ctx context.Context, st runState, key string) error {
	who := st.Actor[strings.IndexByte(st.Actor, ':')+1:]
	text := fmt.Sprintf(":no_entry: %s holds no role in the relay's policy, so `%s` was not run. Ask an operator to add you to a role's members.", who, st.Run.Name())
	t := st.Target
	if t.Channel == string(envelope.ChannelSlack) && s.cfg.Slack != nil {
		_, err := s.cfg.Slack.PostEphemeralContext(ctx, t.SlackCh, who, slack.MsgOptionText(text, false), slack.MsgOptionTS(t.ThreadTS))
		if err != nil {
			return fmt.Errorf("refuse code run %s: %w", st.Origin, slackmapper.Classify("chat.postEphemeral", err))
		}
		return nil
	}
	return s.postRun(ctx, st, key, text)
}

// rendered is a result as posted: Markdown, and the files to attach in
// Slack (a long output's full text, an image).
type rendered struct {
	text  string
	files []*runFile
}

type runFile struct {
	name, title, mime string
	data              []byte
}

// renderResult writes a tool result as Markdown: text as it is, JSON as a
// code block, images as a file, resources as links; failures and timeouts
// read as such; long output (or display: collapsed) becomes a summary line
// with the full text as a file (beside the image, if any).
func renderResult(st runState, res map[string]any, long int) rendered {
	if long <= 0 {
		long = DefaultLongOutput
	}
	head := "`" + st.Run.Name() + "`"
	status, _ := res["status"].(string)
	if status == string(tools.StatusCancelled) {
		return rendered{text: cancelledText(head, st, res)}
	}
	if status != string(tools.StatusSuccess) {
		return rendered{text: failureText(head, status, res)}
	}
	body, image := renderContent(res)
	if st.Run.Display == DisplayBlock && !strings.HasPrefix(body, "```") {
		body = "```\n" + body + "\n```"
	}
	var files []*runFile
	switch {
	case image != nil && st.Target.Channel == string(envelope.ChannelGitHub):
		// Only Slack gets files; a comment says what it could not show.
		body += fmt.Sprintf("\n_(an %s image of %d bytes, not shown: a GitHub comment cannot carry a file)_", image.mime, len(image.data))
	case image != nil:
		body += "\n_(image attached: " + image.name + ")_"
		files = append(files, image)
	}
	if st.Run.Display == DisplayCollapsed || clip.Chars(body, long+1) != body {
		full := body
		summary := fmt.Sprintf("%s returned %d lines, %d characters: %s", head, strings.Count(full, "\n")+1, len([]rune(full)), clip.To(clip.Line(full, 120), 120))
		if st.Target.Channel == string(envelope.ChannelGitHub) {
			if n := utf8.RuneCountInString(full); n > githubFold {
				full = clip.Chars(full, githubFold) + fmt.Sprintf("\n\n_(%d characters more not shown)_", n-githubFold+1)
			}
			return rendered{text: summary + "\n\n<details><summary>Full output</summary>\n\n" + full + "\n\n</details>"}
		}
		output := &runFile{name: st.Run.Tool + "-output.txt", title: st.Run.Name() + " output", data: []byte(full)}
		return rendered{text: summary + " (full output attached)", files: append([]*runFile{output}, files...)}
	}
	return rendered{text: head + ":\n" + body, files: files}
}

// cancelledText says who cancelled a run: a Slack user as a mention in
// Slack, else as the runner audited them ("cli:alice", "github:octocat").
func cancelledText(head string, st runState, res map[string]any) string {
	by, _ := res["cancelled_by"].(string)
	if id, ok := strings.CutPrefix(by, "slack:"); ok && st.Target.Channel == string(envelope.ChannelSlack) {
		by = "<@" + id + ">"
	}
	if by == "" {
		return fmt.Sprintf(":octagonal_sign: %s was cancelled.", head)
	}
	return fmt.Sprintf(":octagonal_sign: %s was cancelled by %s.", head, by)
}

func failureText(head, status string, res map[string]any) string {
	errText, _ := res["error"].(string)
	if status == string(tools.StatusTimeout) {
		ms, _ := res["duration_ms"].(float64)
		return fmt.Sprintf(":hourglass: %s timed out after %.0f s: %s", head, ms/1000, clip.Line(errText, 300))
	}
	return fmt.Sprintf(":x: %s failed (%s): %s", head, status, clip.Line(errText, 500))
}

// renderContent turns the MCP content blocks into Markdown and the first
// image into a file.
func renderContent(res map[string]any) (string, *runFile) {
	var parts []string
	var file *runFile
	blocks, _ := res["content"].([]any)
	for _, b := range blocks {
		m, _ := b.(map[string]any)
		switch m["type"] {
		case "text":
			parts = append(parts, textPart(str(m["text"])))
		case "image":
			if f := imageFile(m); f != nil && file == nil {
				file = f
			}
		case "resource_link":
			parts = append(parts, link(str(m["name"]), str(m["uri"])))
		case "resource":
			r, _ := m["resource"].(map[string]any)
			parts = append(parts, link(str(r["uri"]), str(r["uri"])))
		}
	}
	if len(parts) == 0 && res["structured"] != nil {
		b, _ := json.MarshalIndent(res["structured"], "", "  ")
		parts = append(parts, "```json\n"+string(b)+"\n```")
	}
	if len(parts) == 0 && file == nil {
		parts = append(parts, "_(no output)_")
	}
	return strings.Join(parts, "\n"), file
}

// textPart shows JSON text as a code block, other text as Markdown.
func textPart(text string) string {
	t := strings.TrimSpace(text)
	if (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Valid([]byte(t)) {
		var buf bytes.Buffer
		if json.Indent(&buf, []byte(t), "", "  ") == nil {
			t = buf.String()
		}
		return "```json\n" + t + "\n```"
	}
	return text
}

func imageFile(m map[string]any) *runFile {
	data, err := base64.StdEncoding.DecodeString(str(m["data"]))
	if err != nil || len(data) == 0 {
		return nil
	}
	mime := str(m["mimeType"])
	ext := "bin"
	if _, sub, ok := strings.Cut(mime, "/"); ok && sub != "" {
		ext = sub
	}
	return &runFile{name: "image." + ext, title: "image (" + mime + ")", mime: mime, data: data}
}

func link(name, uri string) string {
	if name == "" {
		name = uri
	}
	return "[" + name + "](" + uri + ")"
}

func str(v any) string { s, _ := v.(string); return s }

// uploadRunFile attaches a file to the run's Slack thread
// (files.getUploadURLExternal, the upload, files.completeUploadExternal).
func (s *Service) uploadRunFile(ctx context.Context, st runState, f *runFile) error {
	_, err := s.cfg.Slack.UploadFileContext(ctx, slack.UploadFileParameters{
		Reader: bytes.NewReader(f.data), FileSize: len(f.data), Filename: f.name, Title: f.title,
		Channel: st.Target.SlackCh, ThreadTimestamp: st.Target.ThreadTS,
	})
	if err != nil {
		return slackmapper.Classify("files.completeUploadExternal", err)
	}
	return nil
}
