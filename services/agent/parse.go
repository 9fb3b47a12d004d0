package agent

import (
	"encoding/json"
	"regexp"
	"strings"
)

// ContentToolCalls recognises a tool call that a model wrote into its message
// content instead of tool_calls (some llama.cpp and Ollama templates do):
//
//   - <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one or more
//     (Hermes, Qwen);
//   - the whole content, or one ```json fenced block that is the whole
//     content, holding {"name": ..., "arguments"|"parameters": {...}},
//     {"function": {"name": ..., "arguments": ...}}, {"tool_calls": [...]} or
//     an array of these.
//
// It returns the calls (without ids) only when every one names a tool known
// reports true for; otherwise nil, and the content is an answer.
func ContentToolCalls(content string, known func(name string) bool) []LLMCall {
	s := strings.TrimSpace(content)
	if s == "" {
		return nil
	}
	var raws []json.RawMessage
	if strings.Contains(s, "<tool_call>") {
		for _, m := range toolCallTag.FindAllStringSubmatch(s, 20) {
			raws = append(raws, json.RawMessage(strings.TrimSpace(m[1])))
		}
		if len(raws) == 0 {
			return nil
		}
	} else {
		if m := fenced.FindStringSubmatch(s); m != nil {
			s = strings.TrimSpace(m[1])
		}
		if s == "" || (s[0] != '{' && s[0] != '[') {
			return nil
		}
		raws = []json.RawMessage{json.RawMessage(s)}
	}
	var calls []LLMCall
	for _, r := range raws {
		c, ok := decodeCalls(r, 0)
		if !ok {
			return nil
		}
		calls = append(calls, c...)
	}
	if len(calls) == 0 || len(calls) > 20 {
		return nil
	}
	for _, c := range calls {
		if known == nil || !known(c.Name) {
			return nil
		}
	}
	return calls
}

var (
	toolCallTag = regexp.MustCompile(`(?s)<tool_call>(.*?)</tool_call>`)
	fenced      = regexp.MustCompile("(?s)^```(?:json)?\\s*(.*?)\\s*```$")
)

type contentCall struct {
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Parameters json.RawMessage `json:"parameters"`
	Function   *contentCall    `json:"function"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
}

func decodeCalls(raw json.RawMessage, depth int) ([]LLMCall, bool) {
	if depth > 3 {
		return nil, false
	}
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 {
		return nil, false
	}
	if raw[0] == '[' {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
			return nil, false
		}
		var out []LLMCall
		for _, r := range list {
			c, ok := decodeCalls(r, depth+1)
			if !ok {
				return nil, false
			}
			out = append(out, c...)
		}
		return out, true
	}
	var c contentCall
	if json.Unmarshal(raw, &c) != nil {
		return nil, false
	}
	if len(c.ToolCalls) > 0 && c.Name == "" {
		return decodeCalls(c.ToolCalls, depth+1)
	}
	if c.Function != nil && c.Name == "" {
		c = *c.Function
	}
	if c.Name == "" {
		return nil, false
	}
	args := c.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = c.Parameters
	}
	return []LLMCall{{Name: c.Name, Arguments: argString(args)}}, true
}

// argString returns tool arguments as a JSON object text: an object as is, a
// string holding JSON as its content, anything else as "{}".
func argString(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return "{}"
	}
	if s[0] == '"' {
		var inner string
		if json.Unmarshal(raw, &inner) == nil {
			return argString(json.RawMessage(inner))
		}
	}
	var m map[string]any
	if json.Unmarshal([]byte(s), &m) != nil || m == nil {
		return "{}"
	}
	return s
}

// ParseArgs decodes a model's tool-call arguments into an object. Models
// sometimes send "" or "null" for no arguments; both are an empty object. A
// text that is not a JSON object is an error.
func ParseArgs(s string) (map[string]any, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "null" {
		return map[string]any{}, nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// citeRE matches a citation [[ref:ID]]; ids are what memory hands out
// (letters, digits, '-', '_', ':', '.', '/').
var citeRE = regexp.MustCompile(`\[\[ref:([A-Za-z0-9_\-:./]{1,200})\]\]`)

// CitedRefs returns the ref ids an answer cites as [[ref:ID]], in order of
// first appearance, without duplicates.
func CitedRefs(answer string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range citeRE.FindAllStringSubmatch(answer, -1) {
		if id := m[1]; !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// UnknownRefs returns the refs cited in answer that are not in given.
func UnknownRefs(answer string, given []string) []string {
	ok := make(map[string]bool, len(given))
	for _, g := range given {
		ok[g] = true
	}
	var out []string
	for _, c := range CitedRefs(answer) {
		if !ok[c] {
			out = append(out, c)
		}
	}
	return out
}
