// Package summary folds the older turns of a session into a running summary:
// with an OpenAI-compatible chat endpoint when one is configured (LLM), or
// with a deterministic extractive summary that needs nothing (Extractive).
package summary

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/memory/session"
	"github.com/relaystation/relay/secret"
)

// Summariser merges a previous summary and the turns being folded away into
// a new summary. Implementations are safe for concurrent use.
type Summariser interface {
	Summarise(ctx context.Context, previous string, turns []session.Turn) (string, error)
}

// Extractive is the deterministic summary: the previous summary's lines plus,
// per folded turn, "role: " and the turn's first sentence (at most 200 bytes),
// keeping the newest lines within MaxBytes.
type Extractive struct {
	// MaxBytes bounds the summary. Default 1024.
	MaxBytes int
}

// Summarise implements Summariser; it never fails.
func (x Extractive) Summarise(_ context.Context, previous string, turns []session.Turn) (string, error) {
	limit := x.MaxBytes
	if limit <= 0 {
		limit = 1024
	}
	var lines []string
	for _, l := range strings.Split(previous, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	for _, t := range turns {
		s := firstSentence(t.Content, 200)
		if s == "" {
			continue
		}
		lines = append(lines, t.Role+": "+s)
	}
	total := 0
	start := len(lines)
	for start > 0 && total+len(lines[start-1])+1 <= limit {
		start--
		total += len(lines[start]) + 1
	}
	if start == len(lines) && len(lines) > 0 {
		return clip.Within(lines[len(lines)-1], limit), nil
	}
	return strings.Join(lines[start:], "\n"), nil
}

// firstSentence returns the text up to its first sentence end, on one line,
// at most n bytes.
func firstSentence(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	for i := 0; i < len(s); i++ {
		if (s[i] == '.' || s[i] == '!' || s[i] == '?') && (i+1 == len(s) || s[i+1] == ' ') {
			s = s[:i+1]
			break
		}
	}
	return clip.Within(s, n)
}

// LLMConfig configures the chat-model summariser.
type LLMConfig struct {
	// BaseURL is the API root including /v1 (LLM_BASE_URL). Required.
	BaseURL string
	// Model is the chat model (LLM_MODEL). Required.
	Model string
	// APIKey is sent as a bearer token when set (LLM_API_KEY).
	APIKey secret.Value
	// MaxBytes is the summary size asked for and enforced. Default 1024.
	MaxBytes int
	// Timeout bounds one request when ctx has no deadline. Default 60s.
	Timeout time.Duration
	// Fallback summarises when the model fails; nil returns the error.
	Fallback Summariser
	// Logger records fallbacks; nil discards.
	Logger *slog.Logger
}

// LLM summarises with POST {BaseURL}/chat/completions.
type LLM struct {
	cfg    LLMConfig
	client openai.Client
	log    *slog.Logger
}

// NewLLM checks cfg and returns the summariser.
func NewLLM(cfg LLMConfig) (*LLM, error) {
	if cfg.BaseURL == "" || cfg.Model == "" {
		return nil, errors.New("summary: LLM base URL and model are required")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1024
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	key := "unused"
	if cfg.APIKey.IsSet() {
		key = cfg.APIKey.Reveal()
	}
	l := &LLM{cfg: cfg, log: cfg.Logger}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.client = openai.NewClient(option.WithBaseURL(cfg.BaseURL), option.WithAPIKey(key), option.WithMaxRetries(1))
	return l, nil
}

const systemPrompt = "You keep the running summary of a support conversation thread. Merge the previous summary " +
	"and the new turns into one concise plain-text summary of at most %d characters. Keep facts, decisions, " +
	"open questions, people's roles, issue numbers and tool results; drop greetings and repetition. " +
	"Answer with the summary only."

// Summarise implements Summariser.
func (l *LLM) Summarise(ctx context.Context, previous string, turns []session.Turn) (string, error) {
	s, err := l.summarise(ctx, previous, turns)
	if err != nil && l.cfg.Fallback != nil {
		l.log.Warn("LLM summary failed; using the fallback summariser", "model", l.cfg.Model, "err", err)
		return l.cfg.Fallback.Summarise(ctx, previous, turns)
	}
	return s, err
}

func (l *LLM) summarise(ctx context.Context, previous string, turns []session.Turn) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.cfg.Timeout)
		defer cancel()
	}
	var b strings.Builder
	if previous != "" {
		b.WriteString("Previous summary:\n")
		b.WriteString(previous)
		b.WriteString("\n\n")
	}
	b.WriteString("New turns:\n")
	for _, t := range turns {
		fmt.Fprintf(&b, "%s: %s\n", t.Role, t.Content)
	}
	res, err := l.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: openai.ChatModel(l.cfg.Model),
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage(fmt.Sprintf(systemPrompt, l.cfg.MaxBytes)),
			openai.UserMessage(b.String()),
		},
		Temperature: openai.Float(0),
	})
	if err != nil {
		return "", fmt.Errorf("summarise with %s: %w", l.cfg.Model, err)
	}
	if len(res.Choices) == 0 || strings.TrimSpace(res.Choices[0].Message.Content) == "" {
		return "", fmt.Errorf("summarise with %s: empty answer", l.cfg.Model)
	}
	return clip.Within(strings.TrimSpace(res.Choices[0].Message.Content), l.cfg.MaxBytes), nil
}
