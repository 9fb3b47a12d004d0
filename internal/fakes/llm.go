package fakes

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ChatRequest is the part of an OpenAI chat completion request the fake reads.
type ChatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string `json:"role"`
		Content    any    `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice any `json:"tool_choice"`
	// MaxTokens is max_tokens (0 when unset).
	MaxTokens int `json:"max_tokens"`
}

// ToolNames lists the functions offered.
func (r *ChatRequest) ToolNames() []string {
	var out []string
	for _, t := range r.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}

// LastTool returns the content of the last tool message, as text.
func (r *ChatRequest) LastTool() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "tool" {
			if s, ok := r.Messages[i].Content.(string); ok && s != "" {
				return s
			}
			b, _ := json.Marshal(r.Messages[i].Content)
			return string(b)
		}
	}
	return ""
}

// HasToolResult reports whether the conversation already holds a tool answer.
func (r *ChatRequest) HasToolResult() bool {
	for _, m := range r.Messages {
		if m.Role == "tool" {
			return true
		}
	}
	return false
}

// Text joins the text of every message, for assertions on the prompt.
func (r *ChatRequest) Text() string {
	var b strings.Builder
	for _, m := range r.Messages {
		switch c := m.Content.(type) {
		case string:
			b.WriteString(c)
		default:
			j, _ := json.Marshal(c)
			b.Write(j)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Reply is what the scripted model answers: a final text, or tool calls.
type Reply struct {
	Text      string
	ToolCalls []ToolCall
	// Status, when not 0 or 200, answers with that HTTP error instead.
	Status int
}

// ToolCall is one function call the model makes.
type ToolCall struct {
	Name string
	Args map[string]any
}

// LLM is a fake OpenAI-compatible chat completions endpoint whose answers a
// test scripts with a function of the request.
type LLM struct {
	srv    *httptest.Server
	script func(*ChatRequest) Reply
	mu     sync.Mutex
	reqs   []*ChatRequest
	models []string
	n      atomic.Int64
}

// NewLLM starts the fake, closed when the test ends.
func NewLLM(t Cleaner, script func(*ChatRequest) Reply) *LLM {
	l := &LLM{script: script}
	l.srv = httptest.NewServer(http.HandlerFunc(l.serve))
	t.Cleanup(l.srv.Close)
	return l
}

// URL is the base URL to configure as LLM_BASE_URL (ends in /v1).
func (l *LLM) URL() string { return l.srv.URL + "/v1" }

// Requests returns the chat requests received.
func (l *LLM) Requests() []*ChatRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*ChatRequest(nil), l.reqs...)
}

// SetModels makes GET /models list ids (by default "fake-model").
func (l *LLM) SetModels(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.models = ids
}

func (l *LLM) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		l.mu.Lock()
		ids := l.models
		l.mu.Unlock()
		if ids == nil {
			ids = []string{"fake-model"}
		}
		data := make([]map[string]any, len(ids))
		for i, id := range ids {
			data[i] = map[string]any{"id": id, "object": "model"}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
		return
	}
	if r.URL.Path == "/v1/embeddings" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2,0.3]}]}`)
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.NotFound(w, r)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var req ChatRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	l.reqs = append(l.reqs, &req)
	l.mu.Unlock()
	rep := l.script(&req)
	w.Header().Set("Content-Type", "application/json")
	if rep.Status != 0 && rep.Status != http.StatusOK {
		if rep.Status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "0")
		}
		w.WriteHeader(rep.Status)
		fmt.Fprintf(w, `{"error":{"message":"%s","type":"server_error"}}`, http.StatusText(rep.Status))
		return
	}
	n := l.n.Add(1)
	msg := map[string]any{"role": "assistant", "content": rep.Text}
	finish := "stop"
	if len(rep.ToolCalls) > 0 {
		var calls []any
		for i, c := range rep.ToolCalls {
			args, _ := json.Marshal(c.Args)
			calls = append(calls, map[string]any{"id": fmt.Sprintf("call_%d_%d", n, i), "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": string(args)}})
		}
		msg["tool_calls"] = calls
		msg["content"] = nil
		finish = "tool_calls"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
	})
}
