package envelope

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/relaystation/relay/schemas"
)

// ValidationError reports an envelope that breaks the schema. Field is a JSON
// pointer to the first offending value ("/channel", "/tool_call/name", "/" for
// the whole document).
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid envelope: %s: %s", e.Field, e.Reason)
}

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

func compiled() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		schema, schemaErr = CompileSchema(schemas.MCPMessage)
	})
	return schema, schemaErr
}

// CompileSchema compiles one of the embedded schemas, with format assertions on.
func CompileSchema(name string) (*jsonschema.Schema, error) {
	raw, err := schemas.FS.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read schema %s: %w", name, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse schema %s: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	if err := c.AddResource(name, doc); err != nil {
		return nil, fmt.Errorf("add schema %s: %w", name, err)
	}
	s, err := c.Compile(name)
	if err != nil {
		return nil, fmt.Errorf("compile schema %s: %w", name, err)
	}
	return s, nil
}

// Validate checks e against the embedded MCP message schema by encoding it.
// Check is the equivalent fast path.
func Validate(e *Envelope) error {
	if e == nil {
		return &ValidationError{Field: "/", Reason: "nil envelope"}
	}
	b, err := e.Marshal()
	if err != nil {
		return &ValidationError{Field: "/", Reason: err.Error()}
	}
	return ValidateJSON(b)
}

// ValidateJSON checks raw JSON against the embedded MCP message schema. The
// error is a *ValidationError naming the offending field.
func ValidateJSON(b []byte) error {
	s, err := compiled()
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return &ValidationError{Field: "/", Reason: "not JSON: " + err.Error()}
	}
	if err := FromSchemaError(s.Validate(doc)); err != nil {
		return err
	}
	return checkKeyCase(doc)
}

// knownKeys lists the field names of the objects the Go type decodes. Go's
// decoder matches keys case-insensitively, so a key like "Channel" beside the
// schema-checked "channel" (or instead of an optional one) would reach the Go
// value unchecked; such keys are refused.
var knownKeys = map[string][]string{
	"":               {"id", "timestamp", "channel", "role", "context", "content", "tool_call", "memory_update", "retrieval_refs", "meta"},
	"/context":       {"system", "session", "task"},
	"/tool_call":     {"id", "name", "args", "result"},
	"/memory_update": {"kind", "data", "ttl"},
	"/meta":          {"mcp_version", "thread", "task_id", "source", "budget"},
	"/meta/source":   {"event", "action", "delivery_id", "url", "actor"},
	"/meta/budget":   {"tokens", "limit"},
}

func checkKeyCase(doc any) error {
	for path, names := range knownKeys {
		obj, ok := lookup(doc, path).(map[string]any)
		if !ok {
			continue
		}
		for key := range obj {
			for _, n := range names {
				if key != n && strings.EqualFold(key, n) {
					return &ValidationError{Field: path + "/" + key, Reason: fmt.Sprintf("field names are case-sensitive: want %q", n)}
				}
			}
		}
	}
	return nil
}

func lookup(doc any, path string) any {
	for _, tok := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		if tok == "" {
			continue
		}
		m, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		doc = m[tok]
	}
	return doc
}

// FromSchemaError turns a jsonschema validation error into a *ValidationError
// naming the deepest offending field; other errors pass through, nil stays nil.
func FromSchemaError(err error) error {
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return err
	}
	leaf := ve
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	field := "/" + strings.Join(leaf.InstanceLocation, "/")
	reason := leaf.ErrorKind.LocalizedString(printer)
	// A missing property is reported at its parent; name the property itself.
	if k, ok := leaf.ErrorKind.(*kind.Required); ok && len(k.Missing) > 0 {
		field = strings.TrimSuffix(field, "/") + "/" + k.Missing[0]
	}
	return &ValidationError{Field: field, Reason: reason}
}

var printer = message.NewPrinter(language.English)
