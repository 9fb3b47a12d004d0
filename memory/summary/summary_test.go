package summary_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/relaystation/relay/memory/session"
	"github.com/relaystation/relay/memory/summary"
	"github.com/relaystation/relay/secret"
)

func turns(contents ...string) []session.Turn {
	out := make([]session.Turn, len(contents))
	for i, c := range contents {
		out[i] = session.Turn{ID: string(rune('a' + i)), Role: []string{"user", "assistant"}[i%2], Content: c}
	}
	return out
}

func TestExtractive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, prev string
		turns      []session.Turn
		max        int
		want       string
	}{
		{"first sentences", "", turns("The build fails on main. Logs attached.", "I will look!  More text"), 0,
			"user: The build fails on main.\nassistant: I will look!"},
		{"keeps previous", "user: earlier", turns("next one"), 0, "user: earlier\nuser: next one"},
		{"newest within limit", "user: old line here", turns("newer"), 20, "user: newer"},
		{"skips empty", "", turns("  ", "text"), 0, "assistant: text"},
		{"truncates one long line", "", turns(strings.Repeat("x", 300)), 50, "user: " + strings.Repeat("x", 41) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := summary.Extractive{MaxBytes: tt.max}.Summarise(t.Context(), tt.prev, tt.turns)
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
			if lim := max(tt.max, 1024); len(got) > lim {
				t.Fatalf("got %d bytes, want at most %d", len(got), lim)
			}
		})
	}
}

// chatServer speaks /v1/chat/completions like an OpenAI-compatible server.
func chatServer(t *testing.T, answer string, status int, calls *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer k-123" {
			http.Error(w, "bad request path or auth: "+r.URL.Path, http.StatusBadRequest)
			return
		}
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "m1" || len(req.Messages) != 2 ||
			!strings.Contains(req.Messages[1].Content, "Previous summary:\nold") || !strings.Contains(req.Messages[1].Content, "user: hello") {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		if status != http.StatusOK {
			http.Error(w, `{"error":{"message":"down"}}`, status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "c1", "object": "chat.completion", "created": 1, "model": "m1",
			"choices": []map[string]any{{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": answer}}},
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestLLM(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := chatServer(t, "  The user said hello.  ", http.StatusOK, &calls)
	l, err := summary.NewLLM(summary.LLMConfig{BaseURL: srv.URL + "/v1", Model: "m1", APIKey: secret.New("k-123")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Summarise(t.Context(), "old", turns("hello"))
	if err != nil || got != "The user said hello." {
		t.Fatalf("got %q, %v; want the model's answer trimmed", got, err)
	}
}

func TestLLMFallback(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := chatServer(t, "", http.StatusBadRequest, &calls)
	l, _ := summary.NewLLM(summary.LLMConfig{BaseURL: srv.URL + "/v1", Model: "m1", APIKey: secret.New("k-123"), Fallback: summary.Extractive{}})
	got, err := l.Summarise(t.Context(), "old", turns("hello"))
	if err != nil || got != "old\nuser: hello" {
		t.Fatalf("got %q, %v; want the extractive fallback", got, err)
	}
	if calls.Load() == 0 {
		t.Fatal("the model was never asked")
	}
	noFallback, _ := summary.NewLLM(summary.LLMConfig{BaseURL: srv.URL + "/v1", Model: "m1", APIKey: secret.New("k-123")})
	if _, err := noFallback.Summarise(t.Context(), "old", turns("hello")); err == nil {
		t.Fatal("without fallback: got nil error from a failing model")
	}
}
