package agent

import (
	"encoding/json"

	gojson "github.com/goccy/go-json"
)

// chatRequest is the JSON body of a chat completion request, as openai-go's
// ChatCompletionNewParams encodes the same messages and tools (TestChatBody
// compares the two).
type chatRequest struct {
	Messages []chatMessage `json:"messages"`
	Model    string        `json:"model"`
	Tools    []chatTool    `json:"tools,omitempty"`
}

type chatMessage struct {
	Content    *string        `json:"content,omitempty"`
	Role       string         `json:"role"`
	ToolCallID *string        `json:"tool_call_id,omitempty"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Function chatFunction `json:"function"`
	Type     string       `json:"type"`
}

type chatFunction struct {
	Arguments string `json:"arguments"`
	Name      string `json:"name"`
}

type chatTool struct {
	Function chatFunctionDef `json:"function"`
	Type     string          `json:"type"`
}

type chatFunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// noParameters is the schema offered for a function that declares none.
var noParameters = json.RawMessage(`{"properties":{},"type":"object"}`)

// chatBody encodes the chat completion request of msgs and tools for model
// in one pass. openai-go encodes every nested parameter on its own and
// compacts each level's output again, which with the tools' parameter
// schemas made its encoding the agent's largest cost per step.
func chatBody(model string, msgs []Message, tools []ToolSpec) ([]byte, error) {
	req := chatRequest{Model: model, Messages: make([]chatMessage, 0, len(msgs))}
	for _, m := range msgs {
		cm := chatMessage{Role: m.Role, Content: &m.Content}
		switch m.Role {
		case "system", "user":
		case "tool":
			cm.ToolCallID = &m.ToolCallID
		case "assistant":
			if m.Content == "" && len(m.ToolCalls) > 0 {
				cm.Content = nil
			}
			for _, tc := range m.ToolCalls {
				cm.ToolCalls = append(cm.ToolCalls, chatToolCall{ID: tc.ID, Type: "function",
					Function: chatFunction{Name: tc.Name, Arguments: tc.Arguments}})
			}
		default:
			continue
		}
		req.Messages = append(req.Messages, cm)
	}
	for _, t := range tools {
		p := t.Parameters
		if len(p) == 0 {
			p = noParameters
		}
		req.Tools = append(req.Tools, chatTool{Type: "function",
			Function: chatFunctionDef{Name: t.Name, Description: t.Description, Parameters: p}})
	}
	return marshal(&req)
}

// marshal encodes v with goccy/go-json, a drop-in codec several times faster
// than encoding/json on the task and its tools' schemas; encoding/json is the
// fallback if goccy refuses.
func marshal(v any) ([]byte, error) {
	if b, err := gojson.Marshal(v); err == nil {
		return b, nil
	}
	return json.Marshal(v)
}
