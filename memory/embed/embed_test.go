package embed_test

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/relaystation/relay/memory/embed"
	"github.com/relaystation/relay/secret"
)

func cos(a, b []float32) float64 {
	var d, na, nb float64
	for i := range a {
		d += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return d / math.Sqrt(na*nb)
}

func TestLocal(t *testing.T) {
	t.Parallel()
	l := embed.NewLocal(0)
	if l.Name() != "local-hash-384" || l.Dimensions() != 384 {
		t.Fatalf("got %s with %d dimensions, want local-hash-384", l.Name(), l.Dimensions())
	}
	texts := []string{"the deploy failed on main", "deploy failed on the main branch", "lunch menu for friday", "!!!"}
	vs, err := l.Embed(t.Context(), texts)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := l.Embed(t.Context(), texts[:1])
	for i, v := range vs {
		if len(v) != 384 {
			t.Fatalf("vector %d has %d dimensions", i, len(v))
		}
		if n := cos(v, v); math.Abs(n-1) > 1e-5 {
			t.Fatalf("vector %d is not unit length", i)
		}
	}
	if cos(vs[0], again[0]) < 0.99999 {
		t.Fatal("not deterministic")
	}
	if near, far := cos(vs[0], vs[1]), cos(vs[0], vs[2]); near <= far || near < 0.5 {
		t.Fatalf("similar texts %.3f, unrelated %.3f: want similar texts closer", near, far)
	}
	if _, err := l.Embed(t.Context(), []string{" "}); !errors.Is(err, embed.ErrEmptyInput) {
		t.Fatalf("empty text: got %v, want ErrEmptyInput", err)
	}
}

// embeddingsServer speaks POST /v1/embeddings like an OpenAI-compatible server,
// answering vectors of length dims in reverse order (the index field matters).
func embeddingsServer(t *testing.T, dims int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer e-key" {
			http.Error(w, "wrong path or auth", http.StatusUnauthorized)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "nomic-embed-text" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		data := []map[string]any{}
		for i := len(req.Input) - 1; i >= 0; i-- {
			v := make([]float64, dims)
			v[i%dims] = float64(len(req.Input[i]))
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": v})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "model": req.Model, "data": data,
			"usage": map[string]any{"prompt_tokens": 1, "total_tokens": 1}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestOpenAI(t *testing.T) {
	t.Parallel()
	srv := embeddingsServer(t, 8)
	e, err := embed.NewOpenAI(embed.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "nomic-embed-text", APIKey: secret.New("e-key"), Dimensions: 8})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := e.Embed(t.Context(), []string{"a", "bbb"})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || vs[0][0] != 1 || vs[1][1] != 3 {
		t.Fatalf("got %v, want the vectors in input order", vs)
	}
}

func TestOpenAIDimensionMismatch(t *testing.T) {
	t.Parallel()
	srv := embeddingsServer(t, 768)
	e, _ := embed.NewOpenAI(embed.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "nomic-embed-text", APIKey: secret.New("e-key"), Dimensions: 384})
	_, err := e.Embed(t.Context(), []string{"a"})
	var de *embed.DimensionError
	if !errors.As(err, &de) || de.Want != 384 || de.Got != 768 {
		t.Fatalf("got %v, want a DimensionError 384 vs 768", err)
	}
}

func TestOpenAIUnreachable(t *testing.T) {
	t.Parallel()
	srv := embeddingsServer(t, 8)
	url := srv.URL
	srv.Close()
	e, _ := embed.NewOpenAI(embed.OpenAIConfig{BaseURL: url + "/v1", Model: "m", Dimensions: 8})
	if _, err := e.Embed(t.Context(), []string{"a"}); err == nil {
		t.Fatal("got nil error from a closed server")
	}
}
