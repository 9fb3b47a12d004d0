package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/mappers"
	"github.com/relaystation/relay/secret"
)

// Message is one chat message of a task, in the agent's own form (stored in
// the task bucket and converted for each call).
type Message struct {
	// Role is system, user, assistant or tool.
	Role    string `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are an assistant message's calls.
	ToolCalls []LLMCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// LLMCall is a tool call as the model made it.
type LLMCall struct {
	ID string `json:"id"`
	// Name is the function name offered to the model.
	Name string `json:"name"`
	// Arguments is the JSON text of the arguments.
	Arguments string `json:"arguments"`
}

// ToolSpec is a function offered to the model.
type ToolSpec struct {
	// Name is the function name (letters, digits, '_' and '-').
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Parameters is the JSON Schema of the arguments, as JSON text (an
	// object); empty: an object of no declared properties. It is kept as
	// text because the agent only passes it on: encoded once when the task
	// is created, it is copied, not re-encoded, into every state of the task
	// and every request to the model.
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// Completion is the model's answer: tool calls or a final message.
type Completion struct {
	Content   string
	ToolCalls []LLMCall
	// PromptTokens and CompletionTokens are the endpoint's usage, or 0 when it
	// reported none.
	PromptTokens, CompletionTokens int
	// Model is the model the endpoint says answered, when it says.
	Model string
}

// Model is a chat model that may call tools. It must not rely on
// tool_choice: the answer is either tool calls or a final message.
type Model interface {
	Complete(ctx context.Context, msgs []Message, tools []ToolSpec) (*Completion, error)
}

// ModelFunc adapts a function to Model.
type ModelFunc func(ctx context.Context, msgs []Message, tools []ToolSpec) (*Completion, error)

// Complete calls f.
func (f ModelFunc) Complete(ctx context.Context, msgs []Message, tools []ToolSpec) (*Completion, error) {
	return f(ctx, msgs, tools)
}

// ErrLLMUnavailable is wrapped by an *LLMError when the endpoint could not
// answer (after retries, or with a status retrying cannot fix).
var ErrLLMUnavailable = errors.New("llm endpoint unavailable")

// LLMError reports a chat call that failed for good.
type LLMError struct {
	// Status is the last HTTP status, 0 for a transport error or timeout.
	Status int
	// Attempts is how many requests were sent.
	Attempts int
	Err      error
}

func (e *LLMError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("llm chat completion: HTTP %d after %d attempt(s): %v", e.Status, e.Attempts, e.Err)
	}
	return fmt.Sprintf("llm chat completion: after %d attempt(s): %v", e.Attempts, e.Err)
}

// Unwrap returns the cause and ErrLLMUnavailable.
func (e *LLMError) Unwrap() []error { return []error{e.Err, ErrLLMUnavailable} }

// OpenAIConfig configures an OpenAI-compatible chat endpoint (Ollama,
// llama.cpp --jinja, vLLM, OpenAI).
type OpenAIConfig struct {
	// BaseURL is the API root, for example http://localhost:11434/v1 (LLM_BASE_URL). Required.
	BaseURL string
	// Model is the model name (LLM_MODEL). Required.
	Model string
	// APIKey is sent as a bearer token when set (LLM_API_KEY).
	APIKey secret.Value
	// Timeout bounds one request. Default 120s.
	Timeout time.Duration
	// MaxTries is how many requests one Complete sends at most (429, 5xx,
	// timeouts and transport errors are retried). Default 4.
	MaxTries int
	// Backoff is the first retry delay, doubling up to MaxBackoff. Defaults
	// 500ms and 10s. A Retry-After (or retry-after-ms) header overrides it, up
	// to MaxRetryAfter (default 60s).
	Backoff, MaxBackoff, MaxRetryAfter time.Duration
	// HTTPClient, when set, sends the requests.
	HTTPClient *http.Client
}

func (c *OpenAIConfig) setDefaults() {
	c.Timeout = config.Positive(c.Timeout, 120*time.Second)
	c.MaxTries = config.Positive(c.MaxTries, 4)
	c.Backoff = config.Positive(c.Backoff, 500*time.Millisecond)
	c.MaxBackoff = config.Positive(c.MaxBackoff, 10*time.Second)
	c.MaxRetryAfter = config.Positive(c.MaxRetryAfter, 60*time.Second)
}

// OpenAI is a Model over an OpenAI-compatible /chat/completions endpoint.
// It is safe for concurrent use.
type OpenAI struct {
	cfg  OpenAIConfig
	chat openai.ChatCompletionService
}

// NewOpenAI returns the model of cfg. The client reads no environment
// variables of its own (OPENAI_API_KEY and friends are ignored).
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	cfg.setDefaults()
	if cfg.BaseURL == "" {
		return nil, errors.New("llm: base URL is required")
	}
	if cfg.Model == "" {
		return nil, errors.New("llm: model is required")
	}
	opts := []option.RequestOption{option.WithBaseURL(cfg.BaseURL), option.WithMaxRetries(0)}
	if cfg.APIKey.IsSet() {
		opts = append(opts, option.WithAPIKey(cfg.APIKey.Reveal()))
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = telemetry.HTTPClient(0) // each request is bounded by cfg.Timeout
	}
	opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	// The key lives only in the client's options from here on, so printing
	// the model (even with %+v, which bypasses secret.Value's Stringer inside
	// unexported fields) cannot show it.
	cfg.APIKey = secret.Value{}
	// Clipped: the service keeps this slice and every New appends the
	// request's own options to it (append(r.Options[:], opts...)). With room
	// left in the array, concurrent requests would write their bodies into the
	// same element and could send each other's conversations.
	return &OpenAI{cfg: cfg, chat: openai.NewChatCompletionService(slices.Clip(opts)...)}, nil
}

// Complete sends one chat completion request, retrying 429, 5xx, timeouts
// and transport errors with exponential backoff (honouring Retry-After).
// A failure is an *LLMError; a cancelled ctx returns ctx's error.
func (o *OpenAI) Complete(ctx context.Context, msgs []Message, tools []ToolSpec) (*Completion, error) {
	body, err := chatBody(o.cfg.Model, msgs, tools)
	if err != nil {
		return nil, &LLMError{Err: fmt.Errorf("encode the request: %w", err)}
	}
	res, err := o.send(ctx, openai.ChatCompletionNewParams{}, option.WithRequestBody("application/json", body))
	if err != nil {
		return nil, err
	}
	msg := res.Choices[0].Message
	c := &Completion{Content: msg.Content, PromptTokens: int(res.Usage.PromptTokens), CompletionTokens: int(res.Usage.CompletionTokens),
		Model: res.Model}
	for _, tc := range msg.ToolCalls {
		c.ToolCalls = append(c.ToolCalls, LLMCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return c, nil
}

// send creates one chat completion of params (or of the body opts give),
// retrying 429, 5xx, timeouts and transport errors with exponential backoff
// (honouring Retry-After). A failure is an *LLMError; a cancelled ctx
// returns ctx's error.
func (o *OpenAI) send(ctx context.Context, params openai.ChatCompletionNewParams, opts ...option.RequestOption) (*openai.ChatCompletion, error) {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval, eb.MaxInterval = o.cfg.Backoff, o.cfg.MaxBackoff
	attempts, status := 0, 0
	res, err := backoff.Retry(ctx, func() (*openai.ChatCompletion, error) {
		attempts++
		cctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
		defer cancel()
		res, err := o.chat.New(cctx, params, opts...)
		if err == nil {
			if len(res.Choices) == 0 {
				return nil, backoff.Permanent(errors.New("response has no choices"))
			}
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, backoff.Permanent(ctx.Err())
		}
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			status = apiErr.StatusCode
			if status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500 {
				if d, ok := retryAfter(apiErr.Response, o.cfg.MaxRetryAfter); ok {
					return nil, &retryAfterError{after: &backoff.RetryAfterError{Duration: d}, err: err}
				}
				return nil, err
			}
			return nil, backoff.Permanent(err)
		}
		status = 0
		return nil, err // transport error or per-request timeout
	}, backoff.WithBackOff(eb), backoff.WithMaxTries(uint(o.cfg.MaxTries)), backoff.WithMaxElapsedTime(0))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ra *retryAfterError
		if errors.As(err, &ra) {
			err = ra.err
		}
		return nil, &LLMError{Status: status, Attempts: attempts, Err: err}
	}
	return res, nil
}

// retryAfterError carries a server's requested delay for backoff.Retry while
// keeping the cause.
type retryAfterError struct {
	after *backoff.RetryAfterError
	err   error
}

func (e *retryAfterError) Error() string   { return e.err.Error() }
func (e *retryAfterError) Unwrap() []error { return []error{e.after, e.err} }

// retryAfter is the delay the server asked for (mappers.RetryAfter), capped
// at limit.
func retryAfter(resp *http.Response, limit time.Duration) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	d, ok := mappers.RetryAfter(resp.Header, time.Now())
	return min(d, limit), ok
}

func toParams(msgs []Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs))
	for _, m := range msgs {
		switch m.Role {
		case "system":
			out = append(out, openai.SystemMessage(m.Content))
		case "user":
			out = append(out, openai.UserMessage(m.Content))
		case "tool":
			out = append(out, openai.ToolMessage(m.Content, m.ToolCallID))
		case "assistant":
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	return out
}
