package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"gopkg.in/yaml.v3"

	"github.com/relaystation/relay/envelope"
)

// SchemaFile is the hooks file's JSON Schema inside schemas.FS.
const SchemaFile = "hooks.schema.json"

// Action timeouts, in milliseconds (the MCP-hooks action model's range).
const (
	DefaultTimeoutMS = 30000
	MinTimeoutMS     = 1000
	MaxTimeoutMS     = 300000
)

// DefaultRole is the tool-runner policy role hooks call tools under.
const DefaultRole = "hooks"

// Mapping sources.
const (
	SourceLiteral  = "literal"
	SourceContext  = "context"
	SourceTemplate = "template"
)

// File is the hooks file: {"hooks": [...]}.
type File struct {
	Hooks []*Hook `json:"hooks"`
}

// Hook is one configured hook: when an inbound envelope matches On (and If,
// when set), its Actions run in order.
type Hook struct {
	// Name: letters, digits, '-' and '_', at most 100 characters; unique.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// On are triggers in the agent's syntax: {channel}.{event}[.{action}],
	// "*" as the action matching any.
	On []string `json:"on"`
	// If is an optional condition over the context (see Compile).
	If string `json:"if,omitempty"`
	// Role is the tool-runner policy role the calls run under; default "hooks".
	Role     string   `json:"role,omitempty"`
	Disabled bool     `json:"disabled,omitempty"`
	Actions  []Action `json:"actions"`

	triggers []Trigger
	cond     *Expr
}

// Action is one action of a hook. Type is "mcp".
type Action struct {
	Type       string    `json:"type"`
	Parameters MCPParams `json:"parameters"`
	// Reply "thread" posts the result to the envelope's thread.
	Reply string `json:"reply,omitempty"`
}

// MCPParams are an MCP action's parameters (field names of the MCP-hooks
// action model).
type MCPParams struct {
	ServerID          string    `json:"serverId"`
	ToolName          string    `json:"toolName"`
	ParameterMappings []Mapping `json:"parameterMappings,omitempty"`
	// Timeout in milliseconds, 1000 to 300000; 0 means DefaultTimeoutMS.
	Timeout int `json:"timeout,omitempty"`
}

// Tool is "<serverId>.<toolName>", the name the tool runner calls.
func (p MCPParams) Tool() string { return p.ServerID + "." + p.ToolName }

// TimeoutMS is the action's timeout with the default applied.
func (p MCPParams) TimeoutMS() int {
	if p.Timeout == 0 {
		return DefaultTimeoutMS
	}
	return p.Timeout
}

// Mapping fills one tool parameter from the context.
type Mapping struct {
	ToolParam string `json:"toolParam"`
	// Source is literal, context or template.
	Source string `json:"source"`
	// Value: the literal (string, number or boolean), the context variable's
	// name, or the text/template text.
	Value any `json:"value"`

	tmpl *template.Template
}

// Problem is one finding of validation, naming the hook, the action (1-based,
// 0 for the hook itself) and the field.
type Problem struct {
	Hook    string `json:"hook,omitempty"`
	Action  int    `json:"action,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
	// Warning problems do not refuse the file (a server not reachable yet).
	Warning bool `json:"warning,omitempty"`
}

// where identifies the problem's place: hook, action and field.
func (p Problem) where() string { return fmt.Sprintf("%s\x00%d\x00%s", p.Hook, p.Action, p.Field) }

func (p Problem) String() string {
	var b strings.Builder
	if p.Hook != "" {
		fmt.Fprintf(&b, "hook %q: ", p.Hook)
	}
	if p.Action > 0 {
		fmt.Fprintf(&b, "action %d: ", p.Action)
	}
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// ValidationError lists the errors that refuse a hooks file.
type ValidationError struct {
	Path     string
	Problems []Problem
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = "  " + p.String()
	}
	return fmt.Sprintf("hooks file %s is invalid:\n%s", e.Path, strings.Join(lines, "\n"))
}

// ErrNotFound matches (errors.Is) the error of Load for a missing file.
var ErrNotFound = errors.New("hooks file not found")

// Load reads and validates a hooks file (YAML or JSON, by content). Problems
// are a *ValidationError.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read hooks file: %w", err)
	}
	return Parse(data, filepath.Base(path))
}

// Parse validates a hooks file's content against the schema and the rules
// no schema can say (unique names and toolParams, triggers, conditions,
// templates). name is used in messages.
func Parse(data []byte, name string) (*File, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil { // YAML is a superset of JSON
		return nil, &ValidationError{Path: name, Problems: []Problem{{Message: "not YAML or JSON: " + err.Error()}}}
	}
	if doc == nil {
		doc = map[string]any{}
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, &ValidationError{Path: name, Problems: []Problem{{Message: "not representable as JSON: " + err.Error()}}}
	}
	if probs := schemaProblems(raw); len(probs) > 0 {
		// Report what the schema cannot say as well, once per field.
		var lenient File
		if json.Unmarshal(raw, &lenient) == nil {
			seen := map[string]bool{}
			for _, p := range probs {
				seen[p.where()] = true
			}
			for _, p := range lenient.compile() {
				if !seen[p.where()] {
					probs = append(probs, p)
				}
			}
		}
		return nil, &ValidationError{Path: name, Problems: probs}
	}
	var f File
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, &ValidationError{Path: name, Problems: []Problem{{Message: err.Error()}}}
	}
	if probs := f.compile(); len(probs) > 0 {
		return nil, &ValidationError{Path: name, Problems: probs}
	}
	return &f, nil
}

func schemaProblems(raw []byte) []Problem {
	schema, err := envelope.Schema(SchemaFile)
	if err != nil {
		return []Problem{{Message: err.Error()}}
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return []Problem{{Message: err.Error()}}
	}
	err = schema.Validate(inst)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		if err != nil {
			return []Problem{{Message: err.Error()}}
		}
		return nil
	}
	names := hookNames(inst)
	var out []Problem
	seen := map[string]bool{}
	var walk func(*jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) > 0 {
			for _, c := range v.Causes {
				walk(c)
			}
			return
		}
		p := locate("/"+strings.Join(v.InstanceLocation, "/"), names)
		p.Message = v.ErrorKind.LocalizedString(printer)
		if !seen[p.String()] {
			seen[p.String()] = true
			out = append(out, p)
		}
	}
	walk(ve)
	sort.SliceStable(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

var printer = message.NewPrinter(language.English)

// hookNames are the names of the hooks in a decoded document, by index.
func hookNames(inst any) map[int]string {
	out := map[int]string{}
	m, _ := inst.(map[string]any)
	hs, _ := m["hooks"].([]any)
	for i, h := range hs {
		hm, _ := h.(map[string]any)
		if n, ok := hm["name"].(string); ok {
			out[i] = n
		}
	}
	return out
}

// locate turns "/hooks/0/actions/1/parameters/timeout" into a Problem's hook,
// action and field.
func locate(ptr string, names map[int]string) Problem {
	parts := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	var p Problem
	if len(parts) >= 2 && parts[0] == "hooks" {
		i, _ := strconv.Atoi(parts[1])
		p.Hook = names[i]
		if p.Hook == "" {
			p.Hook = "#" + strconv.Itoa(i+1)
		}
		parts = parts[2:]
		if len(parts) >= 2 && parts[0] == "actions" {
			a, _ := strconv.Atoi(parts[1])
			p.Action = a + 1
			parts = parts[2:]
		}
	}
	var field strings.Builder
	for _, part := range parts {
		if _, err := strconv.Atoi(part); err == nil && field.Len() > 0 {
			field.WriteString("[" + part + "]")
			continue
		}
		if field.Len() > 0 {
			field.WriteByte('.')
		}
		field.WriteString(part)
	}
	p.Field = field.String()
	if p.Field == "" && p.Hook == "" {
		p.Field = "(top level)"
	}
	return p
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,100}$`)

// compile checks what the schema cannot and prepares triggers, conditions
// and templates.
func (f *File) compile() []Problem {
	var probs []Problem
	names := map[string]bool{}
	for i, h := range f.Hooks {
		if h == nil { // `- ` with nothing: the schema says so
			continue
		}
		hp := func(field, format string, args ...any) {
			probs = append(probs, Problem{Hook: h.Name, Field: field, Message: fmt.Sprintf(format, args...)})
		}
		if !nameRE.MatchString(h.Name) {
			hp("name", "%q: want letters, digits, - and _, at most 100 characters", h.Name)
		}
		if names[h.Name] {
			hp("name", "duplicate hook name (hook %d)", i+1)
		}
		names[h.Name] = true
		if h.Role == "" {
			h.Role = DefaultRole
		}
		for j, s := range h.On {
			t, err := ParseTrigger(s)
			if err != nil {
				hp(fmt.Sprintf("on[%d]", j), "%v", err)
				continue
			}
			h.triggers = append(h.triggers, t)
		}
		if strings.TrimSpace(h.If) != "" {
			c, err := Compile(h.If)
			if err != nil {
				hp("if", "%v", err)
			}
			h.cond = c
		}
		for a := range h.Actions {
			probs = append(probs, h.compileAction(a)...)
		}
	}
	return probs
}

func (h *Hook) compileAction(a int) []Problem {
	act := &h.Actions[a]
	var probs []Problem
	ap := func(field, format string, args ...any) {
		probs = append(probs, Problem{Hook: h.Name, Action: a + 1, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if act.Type != "mcp" {
		ap("type", "%q: only \"mcp\" actions are supported", act.Type)
	}
	p := &act.Parameters
	if t := p.Timeout; t != 0 && (t < MinTimeoutMS || t > MaxTimeoutMS) {
		ap("parameters.timeout", "%d ms is outside %d to %d", t, MinTimeoutMS, MaxTimeoutMS)
	}
	params := map[string]bool{}
	for i := range p.ParameterMappings {
		m := &p.ParameterMappings[i]
		field := fmt.Sprintf("parameters.parameterMappings[%d]", i)
		if params[m.ToolParam] {
			ap(field+".toolParam", "%q is mapped twice", m.ToolParam)
		}
		params[m.ToolParam] = true
		switch m.Source {
		case SourceContext:
			s, ok := m.Value.(string)
			if !ok || s == "" {
				ap(field+".value", "source context needs the name of a context variable")
			} else if !knownVariable(s) {
				ap(field+".value", "%q is not a context variable (%s)", s, strings.Join(Variables(), ", "))
			}
		case SourceTemplate:
			s, ok := m.Value.(string)
			if !ok {
				ap(field+".value", "source template needs a string")
				break
			}
			t, err := template.New(m.ToolParam).Option("missingkey=error").Parse(s)
			if err != nil {
				ap(field+".value", "template: %v", err)
				break
			}
			m.tmpl = t
		case SourceLiteral:
		default:
			ap(field+".source", "%q is not literal, context or template", m.Source)
		}
	}
	return probs
}
