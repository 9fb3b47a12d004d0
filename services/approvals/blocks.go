package approvals

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	slackmapper "github.com/relaystation/relay/mappers/slack"
)

// The Block Kit identities of the approval message and its modals. Buttons
// carry the task id as their value.
const (
	ActionApprove = "relay_approval_approve"
	ActionEdit    = "relay_approval_edit"
	ActionReject  = "relay_approval_reject"
	// BlockActions is the block holding the three buttons.
	BlockActions = "relay_approval_actions"
	// ViewEdit and ViewReject are the callback ids of the modals.
	ViewEdit   = "relay_approval_edit"
	ViewReject = "relay_approval_reject"
	// InputText prefixes the edit modal's input blocks (text_0, text_1, ...)
	// and is their action id; InputReason is the reject modal's block and action.
	InputText   = "text"
	InputReason = "reason"
)

// Slack's limits the message and modals stay within.
const (
	maxSectionText = slackmapper.MaxSectionText // characters of a section's text
	maxInputText   = 3000                       // characters of a plain_text_input
	maxTextBlocks  = 40                         // sections of answer text in one message (50 blocks in all)
	maxModalInputs = 90                         // input blocks in one modal (100 blocks in all)
	maxMetadata    = 3000                       // private_metadata
)

// suggestionInfo is what the message shows of the suggestion besides the text.
type suggestionInfo struct {
	SourceURL   string
	SourceEvent string
	UnknownRefs []string
}

func infoOf(raw json.RawMessage) suggestionInfo {
	var in suggestionInfo
	if len(raw) == 0 {
		return in
	}
	// The one-pass parser returns what encoding/json would; anything it
	// cannot vouch for goes to encoding/json.
	e, ok := envelope.ParseFast(raw)
	if !ok {
		e = new(envelope.Envelope)
		if json.Unmarshal(raw, e) != nil {
			return in
		}
	}
	if e.Meta.Source != nil {
		in.SourceURL = e.Meta.Source.URL
		in.SourceEvent = strings.TrimSpace(e.Meta.Source.Event + " " + e.Meta.Source.Action)
	}
	in.UnknownRefs = stringList(e.Meta.Extra["unknown_refs"])
	return in
}

func stringList(v any) []string {
	var out []string
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok && s != "" {
				out = append(out, s)
			}
		}
	case []string:
		out = append(out, x...)
	case string:
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

// chunks splits s into pieces of at most n bytes (n ≥ 4) that join back to s
// exactly (the edit modal's inputs hold the raw Markdown), on line breaks
// where possible and never inside a UTF-8 character.
func chunks(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := strings.LastIndexByte(s[:n], '\n') + 1
		if cut < n/2 {
			cut = len(clip.Prefix(s, n))
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" || len(out) == 0 {
		out = append(out, s)
	}
	return out
}

// preview is the suggestion's text as the approval message shows it: the
// section texts outbound posts to Slack (Markdown converted to mrkdwn, split
// between lines, words or characters, never inside a link, an entity or a
// UTF-8 character), so the approver sees what will be posted.
func preview(text string, ref slackmapper.RefLinker) []string {
	parts := slackmapper.Sections(text, ref)
	if len(parts) == 0 {
		return []string{"_(empty)_"}
	}
	if len(parts) > maxTextBlocks {
		parts = append(parts[:maxTextBlocks], "_… the rest is not shown here; the whole text is posted._")
	}
	return parts
}

func mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
}

func plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

func slackDate(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", t.Unix(), t.UTC().Format(time.RFC3339))
}

// message renders the approval message of r: text (its preview, with
// [[ref:id]] citations linked by ref), destination, source, flags, the state
// line and, while pending, the buttons. It also returns the notification
// fallback text.
func message(r *Record, ref slackmapper.RefLinker) ([]slack.Block, string) {
	in := infoOf(r.Suggestion)
	head := "*Suggested answer* — will be posted to *" + slackmapper.Escape(r.Target.String()) + "*"
	if r.Round > 1 {
		head += fmt.Sprintf(" (round %d)", r.Round)
	}
	blocks := []slack.Block{slack.NewSectionBlock(mrkdwn(head), nil, nil)}

	var ctx []slack.MixedElement
	if in.SourceURL != "" {
		label := "source"
		if in.SourceEvent != "" {
			label = "source: " + in.SourceEvent
		}
		ctx = append(ctx, mrkdwn("<"+slackmapper.Escape(in.SourceURL)+"|"+slackmapper.Escape(label)+">"))
	}
	ctx = append(ctx, mrkdwn("task `"+slackmapper.Escape(r.TaskID)+"`"))
	if r.Status == StatusPending {
		ctx = append(ctx, mrkdwn("expires "+slackDate(r.ExpiresAt)))
	}
	blocks = append(blocks, slack.NewContextBlock("relay_approval_context", ctx...))

	for _, p := range preview(r.Text, ref) {
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(p), nil, nil))
	}
	if len(in.UnknownRefs) > 0 {
		blocks = append(blocks, slack.NewContextBlock("relay_approval_refs",
			mrkdwn(":warning: cites refs it was not given: "+slackmapper.Escape(strings.Join(in.UnknownRefs, ", ")))))
	}
	if r.EditedBy != "" {
		blocks = append(blocks, slack.NewContextBlock("relay_approval_edited", mrkdwn(":pencil2: edited by "+decider(r.EditedBy))))
	}

	var state, fallback string
	switch r.Status {
	case StatusPending:
		approve := slack.NewButtonBlockElement(ActionApprove, r.TaskID, plain("Approve"))
		approve.Style = slack.StylePrimary
		edit := slack.NewButtonBlockElement(ActionEdit, r.TaskID, plain("Edit"))
		reject := slack.NewButtonBlockElement(ActionReject, r.TaskID, plain("Reject"))
		reject.Style = slack.StyleDanger
		blocks = append(blocks, slack.NewActionBlock(BlockActions, approve, edit, reject))
		fallback = "Approval needed: answer to " + r.Target.String()
	case StatusApproved:
		state = ":white_check_mark: *Approved* by <@" + r.DecidedBy + "> " + slackDate(r.DecidedAt) + " — posting to " + slackmapper.Escape(r.Target.String())
		fallback = "Approved: answer to " + r.Target.String()
	case StatusRejected:
		state = ":x: *Rejected* by <@" + r.DecidedBy + "> " + slackDate(r.DecidedAt)
		if r.Reason != "" {
			state += ": " + slackmapper.Escape(r.Reason)
		}
		fallback = "Rejected: answer to " + r.Target.String()
	case StatusExpired:
		state = ":hourglass: *Expired* " + slackDate(r.ExpiresAt) + " without a decision; nothing was posted"
		fallback = "Expired: answer to " + r.Target.String()
	}
	if state != "" {
		if len(state) > maxSectionText {
			state = slackmapper.SplitMrkdwn(state, maxSectionText)[0] // a long reason: never cut inside a link or an entity
		}
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(state), nil, nil))
	}
	return blocks, fallback
}

// viewMetadata is the private_metadata of the modals. thread and task_id are
// the keys mappers/slack reads into meta.thread and meta.task_id.
type viewMetadata struct {
	Thread string `json:"thread,omitempty"`
	TaskID string `json:"task_id"`
	Round  int    `json:"round"`
	// Channel and User let a refusal reach the submitter as an ephemeral message.
	Channel string `json:"channel,omitempty"`
}

func (m viewMetadata) encode() string {
	b, _ := json.Marshal(m)
	if len(b) > maxMetadata {
		m.Thread = ""
		b, _ = json.Marshal(m)
	}
	return string(b)
}

// editView is the modal that edits r's text.
func editView(r *Record, md viewMetadata) slack.ModalViewRequest {
	parts := chunks(r.Text, maxInputText)
	blocks := []slack.Block{slack.NewSectionBlock(mrkdwn("Will be posted to *"+slackmapper.Escape(r.Target.String())+"*"), nil, nil)}
	if len(parts) > maxModalInputs {
		parts = parts[:maxModalInputs] // the modal cannot hold more; the tail is dropped on save
		blocks = append(blocks, slack.NewContextBlock("", mrkdwn(":warning: the text is too long to edit whole; saving keeps only what is shown")))
	}
	for i, p := range parts {
		in := slack.NewPlainTextInputBlockElement(nil, InputText)
		in.Multiline = true
		in.InitialValue = p
		in.MaxLength = maxInputText
		label := "Answer"
		if len(parts) > 1 {
			label = fmt.Sprintf("Answer, part %d of %d", i+1, len(parts))
		}
		b := slack.NewInputBlock(fmt.Sprintf("%s_%d", InputText, i), plain(label), nil, in)
		b.Optional = i > 0
		blocks = append(blocks, b)
	}
	return slack.ModalViewRequest{
		Type:            slack.VTModal,
		Title:           plain("Edit answer"),
		Submit:          plain("Save"),
		Close:           plain("Cancel"),
		Blocks:          slack.Blocks{BlockSet: blocks},
		CallbackID:      ViewEdit,
		PrivateMetadata: md.encode(),
		ExternalID:      "",
	}
}

// rejectView is the modal asking for a rejection's reason.
func rejectView(r *Record, md viewMetadata) slack.ModalViewRequest {
	title, what, ask := "Reject answer", "The answer to *"+slackmapper.Escape(r.Target.String())+"* will not be posted.", "Why should this not be posted?"
	if r.Step != nil {
		title, what, ask = "Reject tool call", "`"+slackmapper.Escape(r.Step.Tool)+"` will not be run; the agent is told who rejected it and why.", "Why should this not run?"
	}
	in := slack.NewPlainTextInputBlockElement(plain(ask), InputReason)
	in.Multiline = true
	in.MaxLength = 2000
	return slack.ModalViewRequest{
		Type:   slack.VTModal,
		Title:  plain(title),
		Submit: plain("Reject"),
		Close:  plain("Cancel"),
		Blocks: slack.Blocks{BlockSet: []slack.Block{
			slack.NewSectionBlock(mrkdwn(what), nil, nil),
			slack.NewInputBlock(InputReason, plain("Reason"), nil, in),
		}},
		CallbackID:      ViewReject,
		PrivateMetadata: md.encode(),
	}
}

// editedText joins the edit modal's inputs from the submitted state
// {block_id: {action_id: value}}; ok is false when no input was found.
func editedText(state map[string]map[string]any) (string, bool) {
	var b strings.Builder
	found := false
	for i := 0; i < maxModalInputs; i++ {
		blk, ok := state[fmt.Sprintf("%s_%d", InputText, i)]
		if !ok {
			break
		}
		found = true
		if s, ok := blk[InputText].(string); ok {
			b.WriteString(s)
		}
	}
	return b.String(), found
}

// reasonOf reads the reject modal's reason.
func reasonOf(state map[string]map[string]any) string {
	s, _ := state[InputReason][InputReason].(string)
	return strings.TrimSpace(s)
}

// decider is who decided or edited, in mrkdwn: a Slack user as a mention,
// an operator of the console by name, marked as such and never as a Slack
// user (a console name is not a Slack identity).
func decider(by string) string {
	if name, ok := strings.CutPrefix(by, ConsolePrefix); ok {
		return "console operator " + slackmapper.Escape(name)
	}
	return "<@" + by + ">"
}
