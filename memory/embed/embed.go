// Package embed turns text into vectors for long-term memory: an
// OpenAI-compatible /v1/embeddings client (Ollama, llama.cpp, vLLM, OpenAI)
// and a deterministic local embedder that needs no network.
//
// Every Embedder has a fixed number of dimensions; the long-term stores check
// it against their own and report a *DimensionError on a mismatch.
package embed

import (
	"context"
	"errors"
	"fmt"
)

// Embedder embeds texts. Implementations are safe for concurrent use.
type Embedder interface {
	// Embed returns one vector per text, in order, each of Dimensions() floats.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Dimensions is the length of every vector Embed returns.
	Dimensions() int
	// Name identifies the model ("local-hash-384", "nomic-embed-text").
	Name() string
}

// DimensionError reports vectors whose length differs from what a store or
// configuration expects: for example a table made for 384 dimensions and an
// embedder that produces 768.
type DimensionError struct {
	// Where names the side that holds Want (a table, a collection, a setting).
	Where string
	// Want is the expected length; Got the length seen.
	Want, Got int
}

func (e *DimensionError) Error() string {
	return fmt.Sprintf("embedding dimension mismatch: %s has %d dimensions, the embedder gives %d "+
		"(set RELAY_MEMORY_DIMENSIONS to match the model, or use a new table/collection)", e.Where, e.Want, e.Got)
}

// ErrEmptyInput is returned for an empty text: no embedding model accepts one.
var ErrEmptyInput = errors.New("embed: empty text")

// One embeds a single text.
func One(ctx context.Context, e Embedder, text string) ([]float32, error) {
	vs, err := e.Embed(ctx, []string{text})
	if err != nil {
		return nil, err
	}
	return vs[0], nil
}
