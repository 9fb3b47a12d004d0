package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/memory"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// retrieveDocsSpec is the function the agent answers itself.
var retrieveDocsSpec = ToolSpec{
	Name:        ToolRetrieveDocs,
	Description: "Search the team's documentation and knowledge base. Returns numbered documents; cite each one you use as [[ref:ID]].",
	Parameters: json.RawMessage(`{"properties":{` +
		`"k":{"description":"how many documents (default 5)","maximum":20,"minimum":1,"type":"integer"},` +
		`"query":{"description":"what to look for","type":"string"}},` +
		`"required":["query"],"type":"object"}`),
}

// newTask builds a task for the trigger e: the prompt (policy, session
// context, retrieved memories, the task) and the tools offered. Memory or a
// tool runner that cannot be reached leaves its part out (with a warning):
// an answer without context is better than none.
func (s *Service) newTask(ctx context.Context, id string, e *envelope.Envelope, log *slog.Logger) *Task {
	now := time.Now().UTC()
	t := &Task{ID: id, Status: StatusRunning, Origin: e, AgentID: s.cfg.AgentID, Role: s.cfg.Role,
		System: s.cfg.System, TaskText: taskText(e), Created: now, Updated: now}
	if tg, err := envelope.TargetOf(e); err == nil {
		t.Target = tg
	} else {
		log.Debug("no answer target", "err", err)
	}
	if s.cfg.Memory != nil {
		if e.Meta.Thread != "" {
			sc, err := s.cfg.Memory.Context(ctx, e.Meta.Thread, s.cfg.ContextBudget)
			if err != nil {
				log.Warn("session context unavailable; continuing without it", "err", err)
			} else {
				t.Session, t.SessionTokens = strings.TrimSpace(sc.Text()), sc.Tokens
			}
		}
		if s.cfg.Refs > 0 && strings.TrimSpace(e.Content) != "" {
			refs, err := s.cfg.Memory.Retrieve(ctx, memory.Query{Text: e.Content, K: s.cfg.Refs})
			if err != nil {
				log.Warn("long-term memory unavailable; continuing without it", "err", err)
			}
			for _, r := range refs {
				t.addRef(Ref{ID: r.ID, URI: r.URI, Text: r.Text})
			}
		}
	}
	t.Tools = s.offeredTools(ctx, LocationOf(e), log)
	t.Messages = []Message{
		{Role: "system", Content: s.systemPrompt(t)},
		{Role: "user", Content: t.TaskText},
	}
	return t
}

// offeredTools lists the role's MCP tools offered at the place (function
// names made valid and unique) and retrieve_docs.
func (s *Service) offeredTools(ctx context.Context, at mcpconfig.Location, log *slog.Logger) []OfferedTool {
	var out []OfferedTool
	used := map[string]bool{}
	if s.cfg.Memory != nil {
		out = append(out, OfferedTool{ToolSpec: retrieveDocsSpec, Tool: ToolRetrieveDocs})
		used[ToolRetrieveDocs] = true
	}
	if s.cfg.Tools == nil {
		return out
	}
	list, err := s.cfg.Tools.Tools(ctx, s.cfg.Role, at)
	if err != nil {
		log.Warn("tool list unavailable; offering no MCP tools", "role", s.cfg.Role, "err", err)
		return out
	}
	for _, ti := range list {
		name := FuncName(ti.Name)
		for i := 2; used[name]; i++ {
			name = fmt.Sprintf("%s_%d", FuncName(ti.Name)[:min(len(FuncName(ti.Name)), 60)], i)
		}
		used[name] = true
		desc := ti.Description
		if desc == "" {
			desc = ti.Title
		}
		if ti.PerUser {
			desc = strings.TrimSpace(desc + " " + perUserNote)
		}
		out = append(out, OfferedTool{ToolSpec: ToolSpec{Name: name, Description: desc, Parameters: schemaJSON(ti.InputSchema)}, Tool: ti.Name, PerUser: ti.PerUser})
	}
	return out
}

// schemaJSON is a tool's input schema as the JSON text offered to the model:
// nil (no declared properties) unless it is a non-empty object.
func schemaJSON(schema any) json.RawMessage {
	m, _ := schema.(map[string]any)
	if len(m) == 0 {
		return nil
	}
	b, err := marshal(m)
	if err != nil {
		return nil
	}
	return b
}

var funcNameBad = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// FuncName turns a tool name "<server>.<tool>" into a function name chat
// APIs accept (^[A-Za-z0-9_-]{1,64}$): "everything.echo" -> "everything__echo".
func FuncName(tool string) string {
	n := strings.ReplaceAll(tool, ".", "__")
	n = funcNameBad.ReplaceAllString(n, "_")
	if len(n) > 64 {
		n = n[:64]
	}
	if n == "" {
		n = "tool"
	}
	return n
}

// taskText is the task given to the model: the inbound content and its link.
func taskText(e *envelope.Envelope) string {
	text := strings.TrimSpace(e.Content)
	if src := e.Meta.Source; src != nil && src.URL != "" {
		text += "\n\nSource: " + src.URL
	}
	return text
}

func (s *Service) systemPrompt(t *Task) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(t.System))
	b.WriteString("\n\nYou write a draft answer in Markdown")
	if t.Target != nil {
		b.WriteString(" that will be posted to " + t.Target.String())
	}
	b.WriteString(" after a human approves it. Reply with the answer text only.")
	if len(t.Tools) > 0 {
		b.WriteString(" Call tools when you need facts; once you have what you need, answer without calling tools.")
	}
	b.WriteString(" When you use a reference, cite it as [[ref:ID]] with its exact id; never cite an id you were not given.")
	if t.Session != "" {
		b.WriteString("\n\n# Conversation so far (" + t.Origin.Meta.Thread + ")\n")
		b.WriteString(t.Session)
	}
	if len(t.Refs) > 0 {
		b.WriteString("\n\n# References\n")
		per := max(s.cfg.MaxToolOutput/len(t.Refs), 200)
		for i, r := range t.Refs {
			writeRef(&b, i+1, r, per)
		}
	}
	return b.String()
}
