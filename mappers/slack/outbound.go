package slack

// Outbound: formatting Markdown for Slack and posting it with the Web API.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"

	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/secret"
)

// Slack's message limits the formatter keeps to. Lengths are counted in bytes
// of the escaped mrkdwn, which is never less than Slack's character count, so
// a part that fits here fits in Slack.
const (
	// MaxSectionText is the longest text of one section block.
	MaxSectionText = 3000
	// MaxBlocks is the most blocks in one message.
	MaxBlocks = 50
	// MaxMessageText is the longest top-level text of one message.
	MaxMessageText = 40000
)

// PostPart is one chat.postMessage worth of a formatted answer: section
// blocks and the same text as the message's fallback (notifications, screen
// readers).
type PostPart struct {
	// Text is the fallback text: the blocks' texts joined by newlines.
	Text string
	// Blocks are mrkdwn section blocks.
	Blocks []slackapi.Block
}

// Sections converts markdown with Mrkdwn and splits the result with
// SplitMrkdwn into section texts of at most MaxSectionText bytes: the texts of
// the section blocks FormatParts posts, in order (none for an empty answer).
// A preview of a post (the approval message) shows these.
func Sections(markdown string, ref RefLinker) []string {
	return SplitMrkdwn(Mrkdwn(markdown, ref), MaxSectionText)
}

// FormatParts splits the Sections of markdown into messages within Slack's
// limits (MaxBlocks blocks and MaxMessageText of text per message). The parts
// are in reading order; an empty answer has no parts.
func FormatParts(markdown string, ref RefLinker) []PostPart {
	sections := Sections(markdown, ref)
	var parts []PostPart
	var cur PostPart
	for _, s := range sections {
		if len(cur.Blocks) > 0 && (len(cur.Blocks) >= MaxBlocks || len(cur.Text)+1+len(s) > MaxMessageText) {
			parts = append(parts, cur)
			cur = PostPart{}
		}
		if cur.Text != "" {
			cur.Text += "\n"
		}
		cur.Text += s
		cur.Blocks = append(cur.Blocks, slackapi.NewSectionBlock(slackapi.NewTextBlockObject(slackapi.MarkdownType, s, false, false), nil, nil))
	}
	if len(cur.Blocks) > 0 {
		parts = append(parts, cur)
	}
	return parts
}

// SplitMrkdwn splits mrkdwn into pieces of at most limit bytes (at least 64),
// breaking between lines where it can, else between words, else between
// characters, and never inside a <link> or an &entity;. A code block cut in
// two is closed at the end of one piece and reopened at the start of the next.
// Empty pieces are dropped.
func SplitMrkdwn(text string, limit int) []string {
	limit = max(limit, 64)
	if strings.TrimSpace(text) == "" {
		return nil
	}
	if len(text) <= limit {
		return []string{text}
	}
	const fence = "```"
	var (
		out     []string
		cur     []string
		curLen  int
		inFence bool
	)
	flush := func() {
		if inFence {
			cur = append(cur, fence)
		}
		s := strings.Trim(strings.Join(cur, "\n"), "\n")
		if strings.TrimSpace(s) != "" && s != fence+"\n"+fence {
			out = append(out, s)
		}
		cur, curLen = nil, 0
		if inFence {
			cur, curLen = []string{fence}, len(fence)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		isFence := strings.HasPrefix(strings.TrimSpace(line), fence)
		if isFence && inFence && len(cur) == 1 && cur[0] == fence {
			// The code block ended right after a cut: drop the reopened fence.
			cur, curLen, inFence = nil, 0, false
			continue
		}
		reserve := 0
		if inFence || isFence {
			reserve = len(fence) + 1
		}
		for _, piece := range splitLine(line, limit-len(fence)*2-2) {
			add := len(piece)
			if len(cur) > 0 {
				add++
			}
			if len(cur) > 0 && curLen+add+reserve > limit {
				flush()
				add = len(piece)
				if len(cur) > 0 {
					add++
				}
			}
			cur = append(cur, piece)
			curLen += add
		}
		if isFence {
			inFence = !inFence
		}
	}
	inFence = inFence && !(len(cur) == 1 && cur[0] == fence)
	flush()
	return out
}

// splitLine cuts one line into pieces of at most n bytes.
func splitLine(line string, n int) []string {
	var out []string
	for len(line) > n {
		cut := len(clip.Prefix(line, n))
		if sp := strings.LastIndexByte(line[:cut], ' '); sp > n/2 {
			cut = sp + 1
		}
		if lt := strings.LastIndexByte(line[:cut], '<'); lt > 0 && lt > strings.LastIndexByte(line[:cut], '>') {
			cut = lt // do not cut a link
		}
		if amp := strings.LastIndexByte(line[:cut], '&'); amp > 0 && amp >= cut-5 && !strings.Contains(line[amp:cut], ";") {
			cut = amp // nor an entity
		}
		if cut <= 0 {
			if cut = len(clip.Prefix(line, n)); cut == 0 {
				_, cut = utf8.DecodeRuneInString(line) // n below one character
			}
		}
		out = append(out, strings.TrimRight(line[:cut], " "))
		line = line[cut:]
	}
	return append(out, line)
}

// PosterConfig configures a Poster.
type PosterConfig struct {
	// Token is the bot token (SLACK_BOT_TOKEN). Required.
	Token secret.Value
	// APIURL is the Web API base (SLACK_API_URL); default
	// "https://slack.com/api/". Tests point it at a local server.
	APIURL string
	// HTTPClient sends the requests; default a client with a 30s timeout.
	HTTPClient *http.Client
	// RefLink renders [[ref:id]] citations as links; nil renders "[ref:id]".
	RefLink RefLinker
	// Logger; nil discards.
	Logger *slog.Logger
}

// ErrNoToken is returned by NewPoster without a bot token.
var ErrNoToken = errors.New("slack: no bot token (SLACK_BOT_TOKEN)")

// Poster posts to Slack with the Web API (slack-go). Its methods map Slack's
// failures to a *PostError. It is safe for concurrent use.
type Poster struct {
	api *slackapi.Client
	ref RefLinker
	log *slog.Logger
}

// NewPoster returns a Poster.
func NewPoster(cfg PosterConfig) (*Poster, error) {
	if !cfg.Token.IsSet() {
		return nil, ErrNoToken
	}
	if cfg.APIURL == "" {
		cfg.APIURL = slackapi.APIURL
	}
	if !strings.HasSuffix(cfg.APIURL, "/") {
		cfg.APIURL += "/"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	api := slackapi.New(cfg.Token.Reveal(), slackapi.OptionAPIURL(cfg.APIURL), slackapi.OptionHTTPClient(mappers.ClientOr(cfg.HTTPClient)))
	return &Poster{api: api, ref: cfg.RefLink, log: cfg.Logger}, nil
}

// API is the underlying slack-go client, for calls the Poster does not wrap.
func (p *Poster) API() *slackapi.Client { return p.api }

// MetadataEventType is the Slack message metadata event type of the relay's
// posts; its payload is {"key": idempotency key, "part": index}.
const MetadataEventType = "relay_post"

// PostOptions adjusts PostMarkdown.
type PostOptions struct {
	// ThreadTS posts into that thread.
	ThreadTS string
	// Key is the idempotency key, stored in each message's metadata so
	// FindPosted can recognise the parts after a crash.
	Key string
	// Skip is how many parts were already posted (a resumed post): they are
	// not posted again.
	Skip int
	// OnPart, when set, is called after each part is posted, with its index
	// and ts; an error stops the post and is returned.
	OnPart func(i int, ts string) error
}

// Posted is where a post landed.
type Posted struct {
	// Channel is the channel id Slack answered with.
	Channel string
	// TS are the timestamps of the parts posted by this call, in order.
	TS []string
}

// PostMarkdown formats markdown with FormatParts and posts the parts in order
// to channel. It returns what it posted, also on error (the parts before the
// failing one).
func (p *Poster) PostMarkdown(ctx context.Context, channel, markdown string, o PostOptions) (Posted, error) {
	parts := FormatParts(markdown, p.ref)
	var res Posted
	for i := o.Skip; i < len(parts); i++ {
		opts := []slackapi.MsgOption{
			slackapi.MsgOptionText(parts[i].Text, false),
			slackapi.MsgOptionBlocks(parts[i].Blocks...),
			slackapi.MsgOptionDisableLinkUnfurl(),
		}
		if o.ThreadTS != "" {
			opts = append(opts, slackapi.MsgOptionTS(o.ThreadTS))
		}
		if o.Key != "" {
			opts = append(opts, slackapi.MsgOptionMetadata(slackapi.SlackMetadata{
				EventType:    MetadataEventType,
				EventPayload: map[string]any{"key": o.Key, "part": i},
			}))
		}
		ch, ts, err := p.PostMessage(ctx, channel, opts...)
		if err != nil {
			return res, fmt.Errorf("part %d of %d: %w", i+1, len(parts), err)
		}
		res.Channel = ch
		res.TS = append(res.TS, ts)
		if o.OnPart != nil {
			if err := o.OnPart(i, ts); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// FindPosted looks for parts posted with key (PostOptions.Key) in the thread
// (or, without threadTS, in the channel's history since the given time) and
// returns their ts by part index. It needs the channels:history scope (and
// groups:history for private channels).
func (p *Poster) FindPosted(ctx context.Context, channel, threadTS, key string, since time.Time) (map[int]string, error) {
	found := map[int]string{}
	collect := func(msgs []slackapi.Message) {
		for _, m := range msgs {
			if m.Metadata.EventType != MetadataEventType || fmt.Sprint(m.Metadata.EventPayload["key"]) != key {
				continue
			}
			if n, err := strconv.Atoi(fmt.Sprint(m.Metadata.EventPayload["part"])); err == nil {
				found[n] = m.Timestamp
			}
		}
	}
	oldest := ""
	if !since.IsZero() {
		oldest = strconv.FormatInt(since.Unix(), 10) + ".000000"
	}
	cursor := ""
	for page := 0; page < 20; page++ {
		if threadTS != "" {
			msgs, more, next, err := p.api.GetConversationRepliesContext(ctx, &slackapi.GetConversationRepliesParameters{
				ChannelID: channel, Timestamp: threadTS, Cursor: cursor, Oldest: oldest, Limit: 200, IncludeAllMetadata: true,
			})
			if err != nil {
				return nil, Classify("conversations.replies", err)
			}
			collect(msgs)
			if !more || next == "" {
				break
			}
			cursor = next
			continue
		}
		h, err := p.api.GetConversationHistoryContext(ctx, &slackapi.GetConversationHistoryParameters{
			ChannelID: channel, Cursor: cursor, Oldest: oldest, Limit: 200, IncludeAllMetadata: true,
		})
		if err != nil {
			return nil, Classify("conversations.history", err)
		}
		collect(h.Messages)
		if !h.HasMore || h.ResponseMetaData.NextCursor == "" {
			break
		}
		cursor = h.ResponseMetaData.NextCursor
	}
	return found, nil
}

// PostMessage is chat.postMessage: it returns the channel id and the message ts.
func (p *Poster) PostMessage(ctx context.Context, channel string, opts ...slackapi.MsgOption) (string, string, error) {
	ch, ts, err := p.api.PostMessageContext(ctx, channel, opts...)
	if err != nil {
		return "", "", Classify("chat.postMessage", err)
	}
	return ch, ts, nil
}

// UpdateMessage is chat.update of the message ts in channel: it returns the
// channel id and the ts.
func (p *Poster) UpdateMessage(ctx context.Context, channel, ts string, opts ...slackapi.MsgOption) (string, string, error) {
	ch, ts, _, err := p.api.UpdateMessageContext(ctx, channel, ts, opts...)
	if err != nil {
		return "", "", Classify("chat.update", err)
	}
	return ch, ts, nil
}

// PostEphemeral is chat.postEphemeral (visible to user only): it returns the
// message ts.
func (p *Poster) PostEphemeral(ctx context.Context, channel, user string, opts ...slackapi.MsgOption) (string, error) {
	ts, err := p.api.PostEphemeralContext(ctx, channel, user, opts...)
	if err != nil {
		return "", Classify("chat.postEphemeral", err)
	}
	return ts, nil
}

// OpenView is views.open with a trigger id from an interaction: it returns
// the view id.
func (p *Poster) OpenView(ctx context.Context, triggerID string, view slackapi.ModalViewRequest) (string, error) {
	resp, err := p.api.OpenViewContext(ctx, triggerID, view)
	if err != nil {
		return "", Classify("views.open", err)
	}
	return resp.ID, nil
}

// PostError is a failed Slack Web API call.
type PostError struct {
	// Op is the API method, for example "chat.postMessage".
	Op string
	// Status is the HTTP status when Slack answered with one other than 200;
	// 429 for rate limits.
	Status int
	// Code is Slack's error code ("channel_not_found", "invalid_auth") of an
	// answer with ok=false.
	Code string
	// RetryAfter is Slack's Retry-After on a rate limit.
	RetryAfter time.Duration
	// Err is the underlying error.
	Err error
}

func (e *PostError) Error() string {
	switch {
	case e.Code != "":
		return fmt.Sprintf("slack %s: %s", e.Op, e.Code)
	case e.Status == http.StatusTooManyRequests:
		return fmt.Sprintf("slack %s: rate limited, retry after %s", e.Op, e.RetryAfter)
	case e.Status != 0:
		return fmt.Sprintf("slack %s: %d %s", e.Op, e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("slack %s: %v", e.Op, e.Err)
}

func (e *PostError) Unwrap() error { return e.Err }

// transientCodes are Slack error codes worth retrying; every other code means
// the request itself is wrong (bad token, unknown channel, archived channel,
// malformed blocks) and retrying cannot help.
var transientCodes = map[string]bool{
	"ratelimited": true, "rate_limited": true, "internal_error": true, "fatal_error": true,
	"service_unavailable": true, "request_timeout": true, "team_added_to_org": true,
}

// Permanent reports whether retrying cannot help.
func (e *PostError) Permanent() bool {
	switch {
	case e.Code != "":
		return !transientCodes[e.Code]
	case e.Status == 0:
		return errors.Is(e.Err, slackapi.ErrParametersMissing) || errors.Is(e.Err, slackapi.ErrBlockIDNotUnique)
	case e.Status >= 500, e.Status == http.StatusTooManyRequests, e.Status == http.StatusRequestTimeout:
		return false
	}
	return true
}

// RetryDelay is Slack's Retry-After, or 0.
func (e *PostError) RetryDelay() time.Duration { return e.RetryAfter }

// Classify wraps an error of a slack-go call op ("chat.update") in a
// *PostError, which classifies itself for the bus (bus.Classified): callers of
// slack-go outside Poster use it so Slack's failures mean one thing everywhere.
func Classify(op string, err error) error {
	pe := &PostError{Op: op, Err: err}
	var rl *slackapi.RateLimitedError
	var sc slackapi.StatusCodeError
	var se slackapi.SlackErrorResponse
	switch {
	case errors.As(err, &rl):
		pe.Status, pe.RetryAfter = http.StatusTooManyRequests, rl.RetryAfter
	case errors.As(err, &sc):
		pe.Status = sc.Code
	case errors.As(err, &se):
		pe.Code = se.Err
	}
	return pe
}
