package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Display modes a code block may ask for (`display:`).
const (
	DisplayInline    = "inline"
	DisplayBlock     = "block"
	DisplayCollapsed = "collapsed"
)

// CodeBlock is a fenced block a person wrote to run a tool:
//
//	```everything
//	tool: echo
//	message: hello
//	```
//
// Server is the info string ("" when the block names none); Body is the
// YAML between the fences.
type CodeBlock struct {
	Server string
	Body   string
}

// ToolRun is a code block read: the tool, its arguments and how to show
// the result.
type ToolRun struct {
	Server  string         `json:"server"`
	Tool    string         `json:"tool"`
	Args    map[string]any `json:"args,omitempty"`
	Display string         `json:"display,omitempty"`
}

// Name is "<server>.<tool>".
func (r ToolRun) Name() string { return r.Server + "." + r.Tool }

// serverNameRE is what an info string naming a server looks like (mcp.json
// names); other info strings (yaml, json, go) are not runs.
var serverNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,100}$`)

// slackUnescape undoes Slack's escaping of message text.
var slackUnescape = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

// FindCodeBlocks returns the fenced blocks of text that are runs: the info
// string names a server of servers, or names a server-like word and the body
// has a `tool:` line, or there is no info string and the body has one.
// Other blocks (```go, a quoted log) are not runs. Slack's escaping (&lt;
// &gt; &amp;) is undone, and a closing fence may end the last line, as Slack
// writes it.
func FindCodeBlocks(text string, servers []string) []CodeBlock {
	var out []CodeBlock
	rest := slackUnescape.Replace(text)
	for {
		start := strings.Index(rest, "```")
		if start < 0 {
			return out
		}
		rest = rest[start+3:]
		end := strings.Index(rest, "```")
		if end < 0 {
			return out
		}
		info, body, found := strings.Cut(rest[:end], "\n")
		rest = rest[end+3:]
		if !found {
			info, body = "", info
		}
		info = strings.TrimSpace(info)
		switch {
		case info == "" && hasToolLine(body):
			out = append(out, CodeBlock{Body: body})
		case serverNameRE.MatchString(info) && (slices.Contains(servers, info) || hasToolLine(body)):
			out = append(out, CodeBlock{Server: info, Body: body})
		}
	}
}

var toolLineRE = regexp.MustCompile(`(?m)^\s*tool\s*:`)

func hasToolLine(body string) bool { return toolLineRE.MatchString(body) }

// ErrBadBlock is wrapped by every error of ParseCodeBlock.
var ErrBadBlock = errors.New("bad code block")

// ParseCodeBlock reads a block's YAML body: `tool` names the tool,
// `display` how to show the result, every other key is an argument.
// server is used when the block names none.
func ParseCodeBlock(b CodeBlock, server string) (ToolRun, error) {
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(b.Body), &doc); err != nil {
		return ToolRun{}, fmt.Errorf("%w: the body is not YAML: %v", ErrBadBlock, err)
	}
	tool, _ := doc["tool"].(string)
	if strings.TrimSpace(tool) == "" {
		return ToolRun{}, fmt.Errorf("%w: `tool:` must name the tool to run", ErrBadBlock)
	}
	display, _ := doc["display"].(string)
	switch display {
	case "", DisplayInline, DisplayBlock, DisplayCollapsed:
	default:
		return ToolRun{}, fmt.Errorf("%w: display %q: want inline, block or collapsed", ErrBadBlock, display)
	}
	delete(doc, "tool")
	delete(doc, "display")
	args, err := jsonArgs(doc)
	if err != nil {
		return ToolRun{}, fmt.Errorf("%w: arguments: %v", ErrBadBlock, err)
	}
	if b.Server != "" {
		server = b.Server
	}
	return ToolRun{Server: server, Tool: strings.TrimSpace(tool), Args: args, Display: display}, nil
}

// jsonArgs turns YAML values into JSON ones (numbers as float64, dates as
// strings), as a tool call carries them.
func jsonArgs(doc map[string]any) (map[string]any, error) {
	if len(doc) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}
