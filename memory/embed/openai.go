package embed

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/relaystation/relay/internal/telemetry"
	"github.com/relaystation/relay/secret"
)

// OpenAIConfig configures an OpenAI-compatible embeddings endpoint.
type OpenAIConfig struct {
	// BaseURL is the API root including /v1, for example
	// http://127.0.0.1:11434/v1 (Ollama) or https://api.openai.com/v1
	// (EMBEDDINGS_BASE_URL). Required.
	BaseURL string
	// Model is the embedding model (EMBEDDINGS_MODEL). Required.
	Model string
	// APIKey is sent as a bearer token when set (EMBEDDINGS_API_KEY).
	APIKey secret.Value
	// Dimensions is the vector length the model returns. Required; a response
	// of another length is a *DimensionError.
	Dimensions int
	// RequestDimensions sends "dimensions" in the request (text-embedding-3
	// models can shorten their vectors); leave false for servers that reject it.
	RequestDimensions bool
	// Timeout bounds one request when ctx has no deadline. Default 30s.
	Timeout time.Duration
	// HTTPClient, when set, is used instead of http.DefaultClient.
	HTTPClient *http.Client
}

// OpenAI embeds through POST {BaseURL}/embeddings. It is safe for concurrent use.
type OpenAI struct {
	cfg    OpenAIConfig
	client openai.Client
}

// NewOpenAI checks cfg and returns the client.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.BaseURL == "" || cfg.Model == "" {
		return nil, errors.New("embeddings: base URL and model are required")
	}
	if cfg.Dimensions <= 0 {
		return nil, fmt.Errorf("embeddings: dimensions %d must be positive", cfg.Dimensions)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	opts := []option.RequestOption{option.WithBaseURL(cfg.BaseURL), option.WithMaxRetries(1)}
	if cfg.APIKey.IsSet() {
		opts = append(opts, option.WithAPIKey(cfg.APIKey.Reveal()))
	} else {
		opts = append(opts, option.WithAPIKey("unused"))
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = telemetry.HTTPClient(0) // each request is bounded by ctx or cfg.Timeout
	}
	opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	return &OpenAI{cfg: cfg, client: openai.NewClient(opts...)}, nil
}

// Name is the model name.
func (o *OpenAI) Name() string { return o.cfg.Model }

// Dimensions is the configured vector length.
func (o *OpenAI) Dimensions() int { return o.cfg.Dimensions }

// Embed sends all texts in one request.
func (o *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	for i, t := range texts {
		if t == "" {
			return nil, fmt.Errorf("embed text %d: %w", i, ErrEmptyInput)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.cfg.Timeout)
		defer cancel()
	}
	p := openai.EmbeddingNewParams{
		Model:          openai.EmbeddingModel(o.cfg.Model),
		Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat,
	}
	if o.cfg.RequestDimensions {
		p.Dimensions = openai.Int(int64(o.cfg.Dimensions))
	}
	res, err := o.client.Embeddings.New(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("embeddings %s at %s: %w", o.cfg.Model, o.cfg.BaseURL, err)
	}
	if len(res.Data) != len(texts) {
		return nil, fmt.Errorf("embeddings %s: got %d vectors for %d texts", o.cfg.Model, len(res.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for _, d := range res.Data {
		if d.Index < 0 || int(d.Index) >= len(texts) {
			return nil, fmt.Errorf("embeddings %s: vector index %d out of range", o.cfg.Model, d.Index)
		}
		if len(d.Embedding) != o.cfg.Dimensions {
			return nil, &DimensionError{Where: "RELAY_MEMORY_DIMENSIONS", Want: o.cfg.Dimensions, Got: len(d.Embedding)}
		}
		v := make([]float32, len(d.Embedding))
		for i, x := range d.Embedding {
			v[i] = float32(x)
		}
		out[d.Index] = v
	}
	for i, v := range out {
		if v == nil {
			return nil, fmt.Errorf("embeddings %s: no vector for text %d", o.cfg.Model, i)
		}
	}
	return out, nil
}
