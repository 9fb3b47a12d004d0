package slack

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	slackapi "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/secret"
)

// Name is the provider's route name.
const Name = "slack"

// The routes under /webhooks/slack/.
const (
	RouteEvents       = "events"
	RouteCommands     = "commands"
	RouteInteractions = "interactions"
)

// MetaKey is the meta extra key under which Slack details are kept.
const MetaKey = "slack"

// Config configures the Slack provider.
type Config struct {
	// Secret is the app's signing secret (SLACK_SIGNING_SECRET). Unset means
	// every request is refused.
	Secret secret.Value
	// Now is the clock, used when a request carries no Received time; nil means
	// time.Now.
	Now func() time.Time
	// MaxSkew bounds the distance between X-Slack-Request-Timestamp and the
	// receive time; zero means DefaultMaxSkew (5 minutes).
	MaxSkew time.Duration
}

func (c *Config) setDefaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	c.MaxSkew = config.Positive(c.MaxSkew, DefaultMaxSkew)
}

// Provider verifies and maps Slack requests. It implements mappers.Provider
// and is safe for concurrent use.
type Provider struct {
	cfg Config
}

var _ mappers.Provider = (*Provider)(nil)

// New returns a Slack provider.
func New(cfg Config) *Provider {
	cfg.setDefaults()
	return &Provider{cfg: cfg}
}

// Name returns "slack".
func (p *Provider) Name() string { return Name }

// Routes returns the path suffixes Slack posts to under /webhooks/slack/:
// events, commands and interactions (the gateway's Router interface).
func (p *Provider) Routes() []string {
	return []string{RouteEvents, RouteCommands, RouteInteractions}
}

func (p *Provider) now() time.Time { return p.cfg.Now() }

// Map turns a verified Slack request into envelopes. The route selects the
// payload kind; an unknown route or a body that cannot be parsed is a
// *mappers.ParseError.
func (p *Provider) Map(r *mappers.Request) (mappers.Result, error) {
	switch r.Route {
	case RouteEvents:
		return p.mapEvents(r)
	case RouteCommands:
		return p.mapCommand(r)
	case RouteInteractions:
		return p.mapInteraction(r)
	}
	return mappers.Result{}, parseErr(fmt.Errorf("unknown route %q", r.Route))
}

// ---- Events API ----

// outerEvent is the Events API envelope, read before slack-go's typed parse so
// that event types slack-go does not know are still mapped.
type outerEvent struct {
	Type              string          `json:"type"`
	Challenge         string          `json:"challenge"`
	TeamID            string          `json:"team_id"`
	APIAppID          string          `json:"api_app_id"`
	EnterpriseID      string          `json:"enterprise_id"`
	EventID           string          `json:"event_id"`
	EventTime         int64           `json:"event_time"`
	Event             json.RawMessage `json:"event"`
	MinuteRateLimited int64           `json:"minute_rate_limited"`
}

// innerEvent is the generic view of any inner event: the fields the mapping
// uses, whatever the type.
type innerEvent struct {
	Type        string          `json:"type"`
	Subtype     string          `json:"subtype"`
	User        json.RawMessage `json:"user"` // a string for messages, an object for user_change
	Text        string          `json:"text"`
	Channel     json.RawMessage `json:"channel"` // a string for messages, an object for channel_created
	ChannelType string          `json:"channel_type"`
	TS          string          `json:"ts"`
	ThreadTS    string          `json:"thread_ts"`
	EventTS     string          `json:"event_ts"`
	DeletedTS   string          `json:"deleted_ts"`
	BotID       string          `json:"bot_id"`
	AppID       string          `json:"app_id"`
	Username    string          `json:"username"`
	BotProfile  *struct {
		Name  string `json:"name"`
		AppID string `json:"app_id"`
	} `json:"bot_profile"`
	Edited          json.RawMessage `json:"edited"`
	Message         *innerMessage   `json:"message"`
	PreviousMessage *innerMessage   `json:"previous_message"`
	Reaction        string          `json:"reaction"`
	Item            *struct {
		Type    string `json:"type"`
		Channel string `json:"channel"`
		TS      string `json:"ts"`
	} `json:"item"`
}

type innerMessage struct {
	User       string `json:"user"`
	Text       string `json:"text"`
	TS         string `json:"ts"`
	ThreadTS   string `json:"thread_ts"`
	BotID      string `json:"bot_id"`
	AppID      string `json:"app_id"`
	Subtype    string `json:"subtype"`
	BotProfile *struct {
		Name  string `json:"name"`
		AppID string `json:"app_id"`
	} `json:"bot_profile"`
}

// message is what the mapping needs of a message-like event.
type message struct {
	typ, subtype                  string
	user, text, channel, chanType string
	ts, threadTS                  string
	botID, botName                string
	appID                         string // the app that posted it, for a bot message
	bot, edit, deleted            bool
}

func (p *Provider) mapEvents(r *mappers.Request) (mappers.Result, error) {
	var o outerEvent
	if err := json.Unmarshal(r.Body, &o); err != nil {
		return mappers.Result{}, parseErr(mappers.CheckContentType(r, mappers.JSON, fmt.Errorf("events body: %w", err)))
	}
	switch o.Type {
	case slackevents.URLVerification:
		if o.Challenge == "" {
			return mappers.Result{}, parseErr(errors.New("url_verification without a challenge"))
		}
		return mappers.Result{Reply: &mappers.Reply{
			Status: http.StatusOK, ContentType: "text/plain; charset=utf-8", Body: []byte(o.Challenge),
		}}, nil
	case slackevents.CallbackEvent:
		return p.mapCallback(r, &o)
	case slackevents.AppRateLimited:
		e := p.envelope(r, envelope.RoleSystem, fmt.Sprintf(
			"Slack rate-limited event delivery to app %s in team %s (minute %d)", o.APIAppID, o.TeamID, o.MinuteRateLimited))
		e.Meta.Source = &envelope.Source{Event: o.Type}
		e.Meta.Set(MetaKey, map[string]any{"team": o.TeamID, "bot": false, "edit": false, "api_app_id": o.APIAppID, "minute_rate_limited": o.MinuteRateLimited})
		id := "slack:" + o.TeamID + ":app_rate_limited:" + strconv.FormatInt(o.MinuteRateLimited, 10)
		return mappers.One(envelope.Inbound(envelope.ChannelSlack, o.Type), id, e), nil
	case "":
		return mappers.Result{}, parseErr(errors.New("events body without a type"))
	}
	return mappers.Result{}, parseErr(fmt.Errorf("unknown Events API type %q", o.Type))
}

func (p *Provider) mapCallback(r *mappers.Request, o *outerEvent) (mappers.Result, error) {
	raw := bytes.TrimSpace(o.Event)
	if len(raw) == 0 || raw[0] != '{' {
		return mappers.Result{}, parseErr(errors.New("event_callback without an event object"))
	}
	var in innerEvent
	if err := json.Unmarshal(raw, &in); err != nil {
		return mappers.Result{}, parseErr(fmt.Errorf("inner event: %w", err))
	}
	if in.Type == "" {
		return mappers.Result{}, parseErr(errors.New("inner event without a type"))
	}
	m := genericMessage(&in)
	// The typed parse of slack-go, where it knows the type; anything it cannot
	// parse keeps the generic view, so a valid delivery is never refused.
	if ev, err := slackevents.ParseEvent(r.Body, slackevents.OptionNoVerifyToken()); err == nil {
		typedMessage(&m, ev.InnerEvent.Data)
	}

	team := o.TeamID
	e := p.envelope(r, roleFor(in.Type), messageContent(&m))
	e.Meta.Source = &envelope.Source{Event: in.Type, Action: in.Subtype, DeliveryID: o.EventID, Actor: cmp.Or(m.user, m.botID)}
	if m.channel != "" && cmp.Or(m.threadTS, m.ts) != "" {
		e.Meta.Thread = envelope.SlackThread(team, m.channel, cmp.Or(m.threadTS, m.ts))
	}
	extra := map[string]any{
		"team":     team,
		"bot":      m.bot,
		"edit":     m.edit,
		"event_id": o.EventID,
	}
	setIf(extra, "channel", m.channel)
	setIf(extra, "channel_type", m.chanType)
	setIf(extra, "user", m.user)
	setIf(extra, "ts", m.ts)
	setIf(extra, "thread_ts", m.threadTS)
	setIf(extra, "subtype", in.Subtype)
	setIf(extra, "bot_id", m.botID)
	setIf(extra, "bot_name", trim(m.botName))
	setIf(extra, "api_app_id", o.APIAppID)
	setIf(extra, "app_id", m.appID)
	setIf(extra, "enterprise_id", o.EnterpriseID)
	if m.appID != "" && m.appID == o.APIAppID {
		// Posted by the app this event is for: the relay's own post.
		extra["self"] = true
	}
	if m.deleted {
		extra["deleted"] = true
	}
	if in.Reaction != "" {
		extra["reaction"] = trim(in.Reaction)
	}
	if n := r.Header.Get("X-Slack-Retry-Num"); n != "" {
		extra["retry_num"] = trim(n)
		setIf(extra, "retry_reason", trim(r.Header.Get("X-Slack-Retry-Reason")))
	}
	e.Meta.Set(MetaKey, trimAll(extra))

	id := "slack:" + team + ":" + o.EventID
	if o.EventID == "" {
		id = bodyID(team, "event", r.Body)
	}
	return mappers.One(envelope.Inbound(envelope.ChannelSlack, in.Type), id, e), nil
}

// genericMessage reads the fields every event type may carry.
func genericMessage(in *innerEvent) message {
	m := message{
		typ:      in.Type,
		subtype:  in.Subtype,
		user:     rawString(in.User),
		text:     in.Text,
		channel:  rawString(in.Channel),
		chanType: in.ChannelType,
		ts:       in.TS,
		threadTS: in.ThreadTS,
		botID:    in.BotID,
		botName:  in.Username,
	}
	m.appID = in.AppID
	if in.BotProfile != nil {
		m.botName = cmp.Or(m.botName, in.BotProfile.Name)
		m.appID = cmp.Or(m.appID, in.BotProfile.AppID)
	}
	m.bot = in.BotID != "" || in.BotProfile != nil || in.Subtype == "bot_message"
	m.edit = in.Subtype == "message_changed" || (len(in.Edited) > 0 && string(in.Edited) != "null")
	switch in.Subtype {
	case "message_changed":
		if in.Message != nil {
			nm := in.Message
			m.user, m.text, m.ts, m.threadTS = nm.User, nm.Text, nm.TS, nm.ThreadTS
			if nm.BotID != "" || nm.BotProfile != nil || nm.Subtype == "bot_message" {
				m.bot = true
				m.botID = cmp.Or(nm.BotID, m.botID)
				m.appID = cmp.Or(nm.AppID, m.appID)
				if nm.BotProfile != nil {
					m.botName = nm.BotProfile.Name
					m.appID = cmp.Or(m.appID, nm.BotProfile.AppID)
				}
			}
		}
	case "message_deleted":
		m.deleted = true
		m.ts = cmp.Or(in.DeletedTS, m.ts)
		if pm := in.PreviousMessage; pm != nil {
			m.user, m.text, m.threadTS = pm.User, pm.Text, pm.ThreadTS
			m.ts = cmp.Or(pm.TS, m.ts)
		}
	}
	if in.Item != nil && m.channel == "" { // reactions, pins
		m.channel, m.ts = in.Item.Channel, in.Item.TS
	}
	if in.Reaction != "" {
		m.text = ":" + in.Reaction + ":"
	}
	return m
}

// typedMessage refines m from slack-go's typed messages and app mentions.
func typedMessage(m *message, data any) {
	switch ev := data.(type) {
	case *slackevents.MessageEvent:
		if ev.SubType == "message_changed" || ev.SubType == "message_deleted" {
			return // the generic view already reads the nested message
		}
		if ev.Message != nil && ev.Message.BotProfile != nil {
			m.bot = true
			m.botName = cmp.Or(m.botName, ev.Message.BotProfile.Name)
		}
		m.bot = m.bot || ev.BotID != "" || ev.SubType == "bot_message"
	case *slackevents.AppMentionEvent:
		m.bot = m.bot || ev.BotID != ""
		m.edit = m.edit || ev.Edited != nil
		m.threadTS = cmp.Or(ev.ThreadTimeStamp, m.threadTS)
		m.ts = cmp.Or(ev.TimeStamp, m.ts)
	}
}

func messageContent(m *message) string {
	who := "<@" + m.user + ">"
	if m.user == "" {
		who = "someone"
	}
	if m.bot {
		who = "bot " + cmp.Or(m.botName, m.botID, m.user, "(unknown)")
	}
	where := ""
	if m.channel != "" {
		where = " in <#" + m.channel + ">"
	}
	switch {
	case m.typ == "app_mention" && m.edit:
		return who + " edited a mention of the app" + where + ": " + m.text
	case m.typ == "app_mention":
		return who + " mentioned the app" + where + ": " + m.text
	case m.deleted:
		return who + " deleted a message" + where + ": " + m.text
	case m.typ == "message" && m.edit:
		return who + " edited a message" + where + ": " + m.text
	case m.typ == "message":
		return who + " wrote" + where + ": " + m.text
	case m.text != "":
		return "Slack " + m.typ + " from " + who + where + ": " + m.text
	}
	return "Slack " + m.typ + " from " + who + where
}

func roleFor(eventType string) envelope.Role {
	switch eventType {
	case "app_uninstalled", "tokens_revoked", "app_rate_limited", "grid_migration_started", "grid_migration_finished":
		return envelope.RoleSystem
	}
	return envelope.RoleUser
}

// ---- slash commands ----

func (p *Provider) mapCommand(r *mappers.Request) (mappers.Result, error) {
	req, err := http.NewRequest(http.MethodPost, "/", bytes.NewReader(r.Body))
	if err != nil {
		return mappers.Result{}, parseErr(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	cmd, err := slackapi.SlashCommandParse(req)
	if err != nil {
		return mappers.Result{}, parseErr(mappers.CheckContentType(r, mappers.Form, fmt.Errorf("slash command form: %w", err)))
	}
	if cmd.Command == "" {
		return mappers.Result{}, parseErr(mappers.CheckContentType(r, mappers.Form, errors.New("slash command without a command")))
	}
	content := "<@" + cmd.UserID + "> ran " + strings.TrimSpace(cmd.Command+" "+cmd.Text)
	if cmd.ChannelID != "" {
		content += " in <#" + cmd.ChannelID + ">"
	}
	e := p.envelope(r, envelope.RoleUser, content)
	e.Meta.Source = &envelope.Source{Event: "command", Action: trim(cmd.Command), DeliveryID: trim(cmd.TriggerID), Actor: trim(cmd.UserID)}
	if cmd.ChannelID != "" && cmd.TriggerID != "" {
		e.Meta.Thread = envelope.SlackThread(cmd.TeamID, cmd.ChannelID, "cmd-"+cmd.TriggerID)
	}
	extra := map[string]any{"team": cmd.TeamID, "bot": false, "edit": false}
	setIf(extra, "team_domain", cmd.TeamDomain)
	setIf(extra, "enterprise_id", cmd.EnterpriseID)
	setIf(extra, "channel", cmd.ChannelID)
	setIf(extra, "channel_name", cmd.ChannelName)
	setIf(extra, "user", cmd.UserID)
	setIf(extra, "user_name", cmd.UserName)
	setIf(extra, "command", cmd.Command)
	setIf(extra, "text", trim(cmd.Text))
	setIf(extra, "response_url", cmd.ResponseURL)
	setIf(extra, "trigger_id", cmd.TriggerID)
	setIf(extra, "api_app_id", cmd.APIAppID)
	e.Meta.Set(MetaKey, trimAll(extra))

	id := "slack:" + cmd.TeamID + ":command:" + cmd.TriggerID
	if cmd.TriggerID == "" {
		id = bodyID(cmd.TeamID, "command", r.Body)
	}
	return mappers.One(envelope.Inbound(envelope.ChannelSlack, "command"), id, e), nil
}

// ---- interactions ----

func (p *Provider) mapInteraction(r *mappers.Request) (mappers.Result, error) {
	ic, err := parseInteraction(r.Body)
	if err != nil {
		return mappers.Result{}, parseErr(mappers.CheckContentType(r, mappers.Form, err))
	}
	typ := string(ic.Type)
	team := cmp.Or(ic.Team.ID, ic.User.TeamID, ic.View.TeamID)
	channel := cmp.Or(ic.Channel.ID, ic.Container.ChannelID)
	messageTS := cmp.Or(ic.Container.MessageTs, ic.Message.Timestamp, ic.MessageTs)
	threadTS := cmp.Or(ic.Container.ThreadTs, ic.Message.ThreadTimestamp, ic.OriginalMessage.ThreadTimestamp)

	actions := interactionActions(ic)
	extra := map[string]any{"type": typ, "team": team, "bot": false, "edit": false}
	setIf(extra, "user", ic.User.ID)
	setIf(extra, "user_name", cmp.Or(ic.User.Name, ic.User.Profile.DisplayName))
	setIf(extra, "channel", channel)
	setIf(extra, "message_ts", messageTS)
	setIf(extra, "thread_ts", threadTS)
	setIf(extra, "response_url", ic.ResponseURL)
	setIf(extra, "trigger_id", ic.TriggerID)
	setIf(extra, "callback_id", ic.CallbackID)
	setIf(extra, "action_ts", ic.ActionTs)
	setIf(extra, "api_app_id", ic.APIAppID)
	setIf(extra, "container_type", ic.Container.Type)
	if len(actions) > 0 {
		extra["actions"], extra["action_ids"] = actionLists(actions)
	}
	if ic.Message.Text != "" {
		extra["message_text"] = ic.Message.Text
	}
	thread, task := "", ""
	if ic.View.ID != "" {
		extra["view"] = viewMeta(ic)
		thread, task = fromPrivateMetadata(ic.View.PrivateMetadata)
	}
	if thread == "" && channel != "" && cmp.Or(threadTS, messageTS) != "" {
		thread = envelope.SlackThread(team, channel, cmp.Or(threadTS, messageTS))
	}

	e := p.envelope(r, envelope.RoleUser, interactionContent(ic, typ, channel, actions))
	e.Meta.Thread = thread
	e.Meta.TaskID = task
	action := ic.CallbackID
	if len(actions) > 0 {
		action, _ = actions[0]["action_id"].(string)
	}
	e.Meta.Source = &envelope.Source{Event: typ, Action: trim(cmp.Or(action, ic.View.CallbackID)), DeliveryID: trim(ic.TriggerID), Actor: trim(ic.User.ID)}
	e.Meta.Set(MetaKey, trimAll(extra))

	id := "slack:" + team + ":" + typ + ":" + ic.TriggerID
	if ic.TriggerID == "" {
		id = bodyID(team, typ, r.Body)
	}
	return mappers.One(envelope.Inbound(envelope.ChannelSlack, typ), id, e), nil
}

// parseInteraction decodes the payload= form field of an interaction request.
func parseInteraction(body []byte) (*slackapi.InteractionCallback, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("interaction form: %w", err)
	}
	payload := form.Get("payload")
	if payload == "" {
		return nil, errors.New("interaction without a payload field")
	}
	var ic slackapi.InteractionCallback
	if err := json.Unmarshal([]byte(payload), &ic); err != nil {
		return nil, fmt.Errorf("interaction payload: %w", err)
	}
	if ic.Type == "" {
		return nil, errors.New("interaction payload without a type")
	}
	return &ic, nil
}

// actionLists returns the actions as a list for meta.slack.actions and
// their non-empty action ids for meta.slack.action_ids.
func actionLists(actions []map[string]any) (list, ids []any) {
	list = make([]any, len(actions))
	ids = make([]any, 0, len(actions))
	for i, a := range actions {
		list[i] = a
		if id, _ := a["action_id"].(string); id != "" {
			ids = append(ids, id)
		}
	}
	return list, ids
}

// viewMeta is meta.slack.view of an interaction with a modal view.
func viewMeta(ic *slackapi.InteractionCallback) map[string]any {
	view := map[string]any{"id": ic.View.ID}
	setIf(view, "callback_id", ic.View.CallbackID)
	setIf(view, "external_id", ic.View.ExternalID)
	setIf(view, "private_metadata", ic.View.PrivateMetadata)
	setIf(view, "hash", ic.View.Hash)
	setIf(view, "root_view_id", ic.View.RootViewID)
	if ic.View.State != nil && len(ic.View.State.Values) > 0 {
		view["state"] = stateValues(ic.View.State.Values)
	}
	if len(ic.ResponseURLs) > 0 {
		urls := make([]any, 0, len(ic.ResponseURLs))
		for _, u := range ic.ResponseURLs {
			urls = append(urls, map[string]any{"block_id": u.BlockID, "action_id": u.ActionID, "channel_id": u.ChannelID, "response_url": u.ResponseURL})
		}
		view["response_urls"] = urls
	}
	return view
}

func interactionActions(ic *slackapi.InteractionCallback) []map[string]any {
	var out []map[string]any
	for _, a := range ic.ActionCallback.BlockActions {
		if a == nil {
			continue
		}
		m := map[string]any{"action_id": a.ActionID, "block_id": a.BlockID, "type": string(a.Type)}
		if v := blockValue(a); v != nil {
			m["value"] = v
		}
		if a.Text.Text != "" {
			m["text"] = a.Text.Text
		}
		setIf(m, "action_ts", a.ActionTs)
		out = append(out, m)
	}
	for _, a := range ic.ActionCallback.AttachmentActions {
		if a == nil {
			continue
		}
		m := map[string]any{"action_id": a.Name, "type": string(a.Type)}
		setIf(m, "value", a.Value)
		setIf(m, "text", a.Text)
		if len(a.SelectedOptions) > 0 {
			vals := make([]any, 0, len(a.SelectedOptions))
			for _, o := range a.SelectedOptions {
				vals = append(vals, o.Value)
			}
			m["value"] = vals
		}
		out = append(out, m)
	}
	return out
}

// blockValue is the value a block element carries, whatever its kind: a
// button's value, the selected option(s), user(s), channel(s),
// conversation(s), date or time.
func blockValue(a *slackapi.BlockAction) any {
	strs := func(ss []string) any {
		out := make([]any, len(ss))
		for i, s := range ss {
			out[i] = s
		}
		return out
	}
	switch {
	case a.Value != "":
		return a.Value
	case a.SelectedOption.Value != "":
		return a.SelectedOption.Value
	case len(a.SelectedOptions) > 0:
		out := make([]any, 0, len(a.SelectedOptions))
		for _, o := range a.SelectedOptions {
			out = append(out, o.Value)
		}
		return out
	case a.SelectedUser != "":
		return a.SelectedUser
	case len(a.SelectedUsers) > 0:
		return strs(a.SelectedUsers)
	case a.SelectedChannel != "":
		return a.SelectedChannel
	case len(a.SelectedChannels) > 0:
		return strs(a.SelectedChannels)
	case a.SelectedConversation != "":
		return a.SelectedConversation
	case len(a.SelectedConversations) > 0:
		return strs(a.SelectedConversations)
	case a.SelectedDate != "":
		return a.SelectedDate
	case a.SelectedTime != "":
		return a.SelectedTime
	case a.SelectedDateTime != 0:
		return a.SelectedDateTime
	}
	return nil
}

func stateValues(values map[string]map[string]slackapi.BlockAction) map[string]any {
	out := make(map[string]any, len(values))
	for block, acts := range values {
		inner := make(map[string]any, len(acts))
		for id, a := range acts {
			inner[id] = blockValue(&a)
		}
		out[block] = inner
	}
	return out
}

// fromPrivateMetadata reads a thread key and task id that the flow opening a
// view stored in private_metadata: either the thread key itself or a JSON
// object {"thread": ..., "task_id": ...}.
func fromPrivateMetadata(pm string) (thread, task string) {
	pm = strings.TrimSpace(pm)
	if pm == "" {
		return "", ""
	}
	if envelope.ThreadChannel(pm) != "" {
		return trim(pm), ""
	}
	var v struct {
		Thread string `json:"thread"`
		TaskID string `json:"task_id"`
	}
	if pm[0] == '{' && json.Unmarshal([]byte(pm), &v) == nil {
		if envelope.ThreadChannel(v.Thread) == "" {
			v.Thread = ""
		}
		return trim(v.Thread), trim(v.TaskID)
	}
	return "", ""
}

func interactionContent(ic *slackapi.InteractionCallback, typ, channel string, actions []map[string]any) string {
	who := "<@" + ic.User.ID + ">"
	if ic.User.ID == "" {
		who = "someone"
	}
	where := ""
	if channel != "" {
		where = " in <#" + channel + ">"
	}
	switch ic.Type {
	case slackapi.InteractionTypeBlockActions, slackapi.InteractionTypeInteractionMessage:
		parts := make([]string, 0, len(actions))
		for _, a := range actions {
			label, _ := a["text"].(string)
			id, _ := a["action_id"].(string)
			s := cmp.Or(label, id)
			if label != "" && id != "" && label != id {
				s = label + " (" + id + ")"
			}
			if v, ok := a["value"]; ok {
				s += " = " + valueString(v)
			}
			parts = append(parts, s)
		}
		return who + " chose " + strings.Join(parts, ", ") + where
	case slackapi.InteractionTypeViewSubmission:
		s := who + " submitted the form " + cmp.Or(ic.View.CallbackID, ic.View.ID, "(unnamed)")
		if ic.View.State != nil && len(ic.View.State.Values) > 0 {
			s += ": " + stateString(ic.View.State.Values)
		}
		return s
	case slackapi.InteractionTypeViewClosed:
		return who + " closed the form " + cmp.Or(ic.View.CallbackID, ic.View.ID, "(unnamed)")
	case slackapi.InteractionTypeShortcut, slackapi.InteractionTypeMessageAction:
		s := who + " used the shortcut " + ic.CallbackID + where
		if ic.Message.Text != "" {
			s += " on: " + ic.Message.Text
		}
		return s
	}
	return who + " sent a Slack " + typ + " interaction" + where
}

func stateString(values map[string]map[string]slackapi.BlockAction) string {
	var parts []string
	for block, acts := range values {
		for id, a := range acts {
			if v := blockValue(&a); v != nil {
				parts = append(parts, block+"."+id+" = "+valueString(v))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

func valueString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		s := make([]string, len(x))
		for i, e := range x {
			s[i] = fmt.Sprint(e)
		}
		return strings.Join(s, ", ")
	}
	return fmt.Sprint(v)
}

// ---- helpers ----

// maxField bounds every string copied into meta, like content.
const maxField = mappers.MaxContent

func (p *Provider) envelope(r *mappers.Request, role envelope.Role, content string) *envelope.Envelope {
	e := envelope.New(envelope.ChannelSlack, role, clip.To(content, mappers.MaxContent))
	at := r.Received
	if at.IsZero() {
		at = p.now()
	}
	e.Timestamp = at.UTC().Truncate(time.Microsecond)
	e.Meta.Budget = &envelope.Budget{Tokens: envelope.EstimateTokens(e.Content)}
	return e
}

func bodyID(team, kind string, body []byte) string {
	sum := sha256.Sum256(body)
	return "slack:" + team + ":" + kind + ":sha256:" + hex.EncodeToString(sum[:])
}

func parseErr(err error) error { return &mappers.ParseError{Provider: Name, Err: err} }

func trim(s string) string { return clip.To(s, maxField) }

// trimAll bounds every string value in m (one level and inside lists and maps).
func trimAll(m map[string]any) map[string]any {
	for k, v := range m {
		m[k] = trimValue(v)
	}
	return m
}

func trimValue(v any) any {
	switch x := v.(type) {
	case string:
		return trim(x)
	case []any:
		for i := range x {
			x[i] = trimValue(x[i])
		}
	case map[string]any:
		trimAll(x)
	}
	return v
}

func setIf(m map[string]any, k, v string) {
	if v != "" {
		m[k] = v
	}
}

// rawString returns a JSON string's value, or "" for any other JSON value.
func rawString(b json.RawMessage) string {
	var s string
	if len(b) > 0 && b[0] == '"' && json.Unmarshal(b, &s) == nil {
		return s
	}
	return ""
}
