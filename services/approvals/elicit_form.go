package approvals

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/slack-go/slack"

	"github.com/relaystation/relay/internal/clip"
	slackmapper "github.com/relaystation/relay/mappers/slack"
	"github.com/relaystation/relay/tools"
)

func formatNumber(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// questionMessage is the question's message in the thread: the server's
// text, who may answer, and the buttons while it is open.
func questionMessage(q *question) ([]slack.Block, string) {
	call := q.Q.Server
	if q.Q.Tool != "" {
		call += "." + q.Q.Tool
	}
	text := fmt.Sprintf(":question: *%s* asks: %s", call, serverText(q.Q.Message, maxSectionText-200))
	blocks := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)}
	var status string
	switch q.Status {
	case elicitPending:
		status = "Only " + answerer(q) + " may answer."
		if !q.Q.Deadline.IsZero() {
			status += " Unanswered, it is declined " + slackDate(q.Q.Deadline) + "."
		}
	case tools.ElicitAccept:
		status = ":white_check_mark: Answered by <@" + q.By + "> " + slackDate(q.At) + "."
	case tools.ElicitDecline:
		status = ":no_entry_sign: Declined by <@" + q.By + "> " + slackDate(q.At) + "."
	case tools.ElicitCancel:
		if q.By == "" {
			status = ":x: Cancelled by the relay " + slackDate(q.At) + ": " + slackmapper.Escape(clip.Chars(q.Reason, 300)) + "."
			break
		}
		status = ":x: Cancelled by <@" + q.By + "> " + slackDate(q.At) + "."
	case elicitExpired:
		status = ":hourglass: Nobody answered in time; declined."
	}
	blocks = append(blocks, slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, status, false, false)))
	if q.Status == elicitPending {
		label := "Answer…"
		if len(tools.Fields(q.Q.Schema)) == 0 {
			label = "Accept"
		}
		answer := slack.NewButtonBlockElement(ActionElicitAnswer, q.Q.ID, slack.NewTextBlockObject(slack.PlainTextType, label, false, false))
		answer.Style = slack.StylePrimary
		blocks = append(blocks, slack.NewActionBlock("relay_elicit_actions", answer,
			slack.NewButtonBlockElement(ActionElicitDecline, q.Q.ID, slack.NewTextBlockObject(slack.PlainTextType, "Decline", false, false)),
			slack.NewButtonBlockElement(ActionElicitCancel, q.Q.ID, slack.NewTextBlockObject(slack.PlainTextType, "Cancel", false, false))))
	}
	return blocks, slackmapper.Escape(call + " asks: " + clip.Chars(q.Q.Message, 200))
}

// questionForm is the modal built from the question's schema.
func questionForm(q *question) slack.ModalViewRequest {
	md, _ := json.Marshal(questionMetadata{Thread: q.Q.Thread, TaskID: q.Q.TaskID, QuestionID: q.Q.ID, Channel: q.Channel})
	blocks := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, serverText(q.Q.Message, maxSectionText), false, false), nil, nil)}
	for i, f := range tools.Fields(q.Q.Schema) {
		if i >= maxModalInputs {
			break
		}
		var hint *slack.TextBlockObject
		if f.Description != "" {
			hint = slack.NewTextBlockObject(slack.PlainTextType, clip.Chars(f.Description, 2000), false, false)
		}
		in := slack.NewInputBlock("elicit_"+f.Name, slack.NewTextBlockObject(slack.PlainTextType, clip.Chars(f.Label(), 2000), false, false), hint, formElement(f))
		in.Optional = !f.Required || f.Type == "boolean"
		blocks = append(blocks, in)
	}
	return slack.ModalViewRequest{
		Type:            slack.VTModal,
		CallbackID:      ViewElicit,
		Title:           slack.NewTextBlockObject(slack.PlainTextType, clip.Chars("Answer "+q.Q.Server, 24), false, false),
		Submit:          slack.NewTextBlockObject(slack.PlainTextType, "Send", false, false),
		Close:           slack.NewTextBlockObject(slack.PlainTextType, "Back", false, false),
		Blocks:          slack.Blocks{BlockSet: blocks},
		PrivateMetadata: string(md),
	}
}

const formAction = "v"

func formElement(f tools.Field) slack.BlockElement {
	options := func() []*slack.OptionBlockObject {
		out := make([]*slack.OptionBlockObject, 0, len(f.Options))
		for _, o := range f.Options {
			out = append(out, slack.NewOptionBlockObject(o.Value, slack.NewTextBlockObject(slack.PlainTextType, clip.Chars(cmp.Or(o.Title, o.Value), 75), false, false), nil))
		}
		return out
	}
	def := func() string {
		if f.Default == nil {
			return ""
		}
		if n, ok := f.Default.(float64); ok {
			return formatNumber(n)
		}
		return fmt.Sprint(f.Default)
	}
	switch {
	case f.Type == "boolean":
		yes := slack.NewOptionBlockObject("true", slack.NewTextBlockObject(slack.PlainTextType, "Yes", false, false), nil)
		e := slack.NewCheckboxGroupsBlockElement(formAction, yes)
		if f.Default == true {
			e.InitialOptions = []*slack.OptionBlockObject{yes}
		}
		return e
	case f.Type == "array":
		e := slack.NewOptionsMultiSelectBlockElement(slack.MultiOptTypeStatic, nil, formAction, options()...)
		if d, ok := f.Default.([]any); ok {
			for _, o := range e.Options {
				if slices.Contains(d, any(o.Value)) {
					e.InitialOptions = append(e.InitialOptions, o)
				}
			}
		}
		return e
	case len(f.Options) > 0:
		e := slack.NewOptionsSelectBlockElement(slack.OptTypeStatic, nil, formAction, options()...)
		for _, o := range e.Options {
			if o.Value == def() && def() != "" {
				e.InitialOption = o
			}
		}
		return e
	case f.Type == "number" || f.Type == "integer":
		e := slack.NewNumberInputBlockElement(nil, formAction, f.Type == "number")
		e.InitialValue = def()
		if f.Minimum != nil {
			e.MinValue = formatNumber(*f.Minimum)
		}
		if f.Maximum != nil {
			e.MaxValue = formatNumber(*f.Maximum)
		}
		return e
	case f.Format == "email":
		e := slack.NewEmailTextInputBlockElement(nil, formAction)
		e.InitialValue = def()
		return e
	case f.Format == "uri":
		e := slack.NewURLTextInputBlockElement(nil, formAction)
		e.InitialValue = def()
		return e
	case f.Format == "date":
		e := slack.NewDatePickerBlockElement(formAction)
		e.InitialDate = def()
		return e
	case f.Format == "date-time":
		e := slack.NewDateTimePickerBlockElement(formAction)
		if t, err := time.Parse(time.RFC3339, def()); err == nil {
			e.InitialDateTime = t.Unix()
		}
		return e
	}
	e := slack.NewPlainTextInputBlockElement(nil, formAction)
	e.InitialValue = def()
	return e
}

// formValues turns the submitted state {block_id: {action_id: value}} into
// the answer's content, typed per the schema; problems name fields whose
// value does not fit.
func formValues(schema map[string]any, state map[string]map[string]any) (map[string]any, []string) {
	out := map[string]any{}
	var problems []string
	for _, f := range tools.Fields(schema) {
		v := state["elicit_"+f.Name][formAction]
		switch f.Type {
		case "boolean":
			list, _ := v.([]any)
			out[f.Name] = slices.Contains(list, any("true"))
			continue
		case "array":
			list, _ := v.([]any)
			if len(list) > 0 || f.Required {
				out[f.Name] = append([]any{}, list...)
			}
			continue
		}
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case float64: // a datetimepicker's unix time
			s = time.Unix(int64(x), 0).UTC().Format(time.RFC3339)
		}
		val, err := f.Parse(s)
		switch {
		case errors.Is(err, tools.ErrEmpty):
			if f.Required {
				problems = append(problems, f.Label()+" is required")
			}
		case err != nil:
			problems = append(problems, err.Error())
		default:
			out[f.Name] = val
		}
	}
	return out, problems
}

// serverText is a server's message for a mrkdwn block: converted as every
// text the relay posts to Slack (mappers/slack.Mrkdwn, which escapes what is
// not Markdown, so a server cannot mention @channel or inject a link) and cut
// to n bytes between lines or words, never inside an entity or a link.
func serverText(s string, n int) string {
	parts := slackmapper.SplitMrkdwn(slackmapper.Mrkdwn(s, nil), n-len(clip.Ellipsis))
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return parts[0] + clip.Ellipsis
}
