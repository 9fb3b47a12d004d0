package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/tools"
)

// Matches reports whether h fires for e (whose context is c): enabled, one
// trigger matching, and the condition, when set, holding.
func (h *Hook) Matches(e *envelope.Envelope, c Context) bool {
	if h.Disabled {
		return false
	}
	for _, t := range h.triggers {
		if t.Matches(e) {
			return h.cond == nil || h.cond.Eval(c)
		}
	}
	return false
}

// Triggers are the hook's parsed `on` entries.
func (h *Hook) Triggers() []Trigger { return h.triggers }

// Match returns the hooks that fire for e, in file order, and e's context
// (nil when no hook's trigger matches: the context is built only when needed).
func (f *File) Match(e *envelope.Envelope) ([]*Hook, Context) {
	var out []*Hook
	var c Context
	for _, h := range f.Hooks {
		if h.Disabled || !slices.ContainsFunc(h.triggers, func(t Trigger) bool { return t.Matches(e) }) {
			continue
		}
		if c == nil {
			c = NewContext(e)
		}
		if h.cond == nil || h.cond.Eval(c) {
			out = append(out, h)
		}
	}
	return out, c
}

// Hook returns the hook named name, or nil.
func (f *File) Hook(name string) *Hook {
	for _, h := range f.Hooks {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// ErrResolve is wrapped by every error of Resolve.
var ErrResolve = errors.New("parameter not resolved")

// Resolve computes an action's arguments from c. inputSchema, when known, is
// the tool's: a string is converted to the number, integer or boolean its
// property asks for.
func (a *Action) Resolve(c Context, inputSchema any) (map[string]any, error) {
	props := properties(inputSchema)
	out := make(map[string]any, len(a.Parameters.ParameterMappings))
	var errs []error
	for i := range a.Parameters.ParameterMappings {
		m := &a.Parameters.ParameterMappings[i]
		v, err := m.resolve(c)
		if err == nil {
			v, err = coerce(v, props[m.ToolParam])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %v", ErrResolve, m.ToolParam, err))
			continue
		}
		out[m.ToolParam] = v
	}
	return out, errors.Join(errs...)
}

func (m *Mapping) resolve(c Context) (any, error) {
	switch m.Source {
	case SourceContext:
		name, _ := m.Value.(string)
		v, ok := c[name]
		if !ok {
			return nil, fmt.Errorf("context variable %q is not set for this envelope", name)
		}
		return v, nil
	case SourceTemplate:
		if m.tmpl == nil {
			return nil, errors.New("template not compiled")
		}
		var b bytes.Buffer
		if err := m.tmpl.Execute(&b, map[string]any(c)); err != nil {
			return nil, err
		}
		return b.String(), nil
	}
	return m.Value, nil
}

func properties(schema any) map[string]any {
	s, _ := schema.(map[string]any)
	p, _ := s["properties"].(map[string]any)
	return p
}

func required(schema any) []string {
	s, _ := schema.(map[string]any)
	var out []string
	switch r := s["required"].(type) {
	case []any:
		for _, x := range r {
			if n, ok := x.(string); ok {
				out = append(out, n)
			}
		}
	case []string:
		out = r
	}
	return out
}

// coerce converts a string to the type the property schema asks for.
func coerce(v any, prop any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return v, nil
	}
	p, _ := prop.(map[string]any)
	var types []string
	switch t := p["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			if n, ok := x.(string); ok {
				types = append(types, n)
			}
		}
	}
	if len(types) == 0 || slices.Contains(types, "string") {
		return s, nil
	}
	for _, t := range types {
		switch t {
		case "integer":
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
				return n, nil
			}
		case "number":
			if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
				return f, nil
			}
		case "boolean":
			if b, err := strconv.ParseBool(strings.TrimSpace(s)); err == nil {
				return b, nil
			}
		}
	}
	return nil, fmt.Errorf("%q is not a %s", clip.Line(s, 60), strings.Join(types, " or "))
}

// Catalog is what the tool runner knows, for checking actions against it.
type Catalog struct {
	// Servers are the servers of mcp.json.
	Servers []string
	// Tools are the tools the hook's role may call, by "<server>.<tool>";
	// nil when the runner did not answer.
	Tools map[string]map[string]tools.ToolInfo
	// Reachable are the servers whose tools were discovered; for the others
	// a missing tool is a warning.
	Reachable map[string]bool
}

// Check validates f's actions against cat: the server exists; once its tools
// are discovered, the tool exists for the hook's role and the mappings cover
// every required parameter. A server whose tools are unknown yields a
// warning, not an error.
func (f *File) Check(cat Catalog) []Problem {
	var probs []Problem
	for _, h := range f.Hooks {
		for i, a := range h.Actions {
			p := a.Parameters
			add := func(field string, warn bool, format string, args ...any) {
				probs = append(probs, Problem{Hook: h.Name, Action: i + 1, Field: field, Warning: warn, Message: fmt.Sprintf(format, args...)})
			}
			if cat.Servers != nil && !slices.Contains(cat.Servers, p.ServerID) {
				add("parameters.serverId", false, "server %q is not in mcp.json (servers: %s)", p.ServerID, strings.Join(cat.Servers, ", "))
				continue
			}
			if cat.Tools == nil || !cat.Reachable[p.ServerID] {
				add("parameters.toolName", true, "server %q is not reachable yet: tool %q and its required parameters are not checked", p.ServerID, p.ToolName)
				continue
			}
			info, ok := cat.Tools[h.Role][p.Tool()]
			if !ok {
				add("parameters.toolName", false, "server %q has no tool %q that role %q may call", p.ServerID, p.ToolName, h.Role)
				continue
			}
			mapped := map[string]bool{}
			for _, m := range p.ParameterMappings {
				mapped[m.ToolParam] = true
			}
			for _, r := range required(info.InputSchema) {
				if !mapped[r] {
					add("parameters.parameterMappings", false, "required parameter %q of %s is not mapped", r, p.Tool())
				}
			}
			props := properties(info.InputSchema)
			for j, m := range p.ParameterMappings {
				if _, ok := props[m.ToolParam]; props != nil && !ok {
					add(fmt.Sprintf("parameters.parameterMappings[%d].toolParam", j), false, "%s has no parameter %q", p.Tool(), m.ToolParam)
				}
			}
		}
	}
	return probs
}

// Errors are the problems that are not warnings.
func Errors(probs []Problem) []Problem {
	var out []Problem
	for _, p := range probs {
		if !p.Warning {
			out = append(out, p)
		}
	}
	return out
}

// compileInput compiles a tool's inputSchema (its JSON) for checking
// resolved arguments: the draft it names, draft-07 when it names none (as
// the tool runner reads it, so the hooks refuse no schema the runner takes).
func compileInput(name string, raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	url := "tool:///" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// checkArgs validates resolved arguments against the compiled inputSchema;
// the arguments go through JSON as they would on the wire.
func checkArgs(s *jsonschema.Schema, args map[string]any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}
