package embed

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// Local is a deterministic embedder that needs no network: feature hashing of
// lower-cased words, word bigrams and character trigrams into a fixed number
// of signed buckets, L2-normalised. It is not a language model: texts that
// share words and word pieces land close together, synonyms do not. It exists
// so the relay works out of the box and tests are reproducible; configure an
// embeddings endpoint for real semantic recall.
//
// The zero value is not usable; use NewLocal.
type Local struct{ dims int }

// NewLocal returns a local embedder with dims dimensions (384 when dims <= 0).
func NewLocal(dims int) *Local {
	if dims <= 0 {
		dims = 384
	}
	return &Local{dims: dims}
}

// Name is "local-hash-{dims}".
func (l *Local) Name() string { return fmt.Sprintf("local-hash-%d", l.dims) }

// Dimensions is the vector length.
func (l *Local) Dimensions() int { return l.dims }

// Embed hashes each text; it never fails except for an empty text.
func (l *Local) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if strings.TrimSpace(t) == "" {
			return nil, fmt.Errorf("embed text %d: %w", i, ErrEmptyInput)
		}
		out[i] = l.vector(t)
	}
	return out, nil
}

func (l *Local) vector(text string) []float32 {
	v := make([]float32, l.dims)
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	add := func(feature string, weight float32) {
		h := fnv.New64a()
		_, _ = h.Write([]byte(feature))
		s := h.Sum64()
		idx := int(s % uint64(l.dims))
		if s>>63 == 1 {
			weight = -weight
		}
		v[idx] += weight
	}
	for i, w := range words {
		add("w:"+w, 1)
		if i > 0 {
			add("b:"+words[i-1]+" "+w, 0.5)
		}
		r := []rune(" " + w + " ")
		for j := 0; j+3 <= len(r); j++ {
			add("c:"+string(r[j:j+3]), 0.25)
		}
	}
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if norm == 0 {
		// Only punctuation: a fixed unit vector, so the result is still valid.
		v[0] = 1
		return v
	}
	inv := float32(1 / math.Sqrt(norm))
	for i := range v {
		v[i] *= inv
	}
	return v
}
