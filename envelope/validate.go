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

// compiledSchemas holds, by schema name, a function returning that schema
// compiled once (Schema).
var compiledSchemas sync.Map

// Schema returns one of the embedded schemas compiled (CompileSchema),
// compiling each at most once per process. It is safe for concurrent use.
func Schema(name string) (*jsonschema.Schema, error) {
	f, ok := compiledSchemas.Load(name)
	if !ok {
		f, _ = compiledSchemas.LoadOrStore(name, sync.OnceValues(func() (*jsonschema.Schema, error) {
			return CompileSchema(name)
		}))
	}
	return f.(func() (*jsonschema.Schema, error))()
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
	doc, err := validateDoc(schemas.MCPMessage, b)
	if err != nil {
		return err
	}
	return checkKeyCase(doc)
}

// ValidateAgainst checks raw JSON against the embedded schema name (Schema).
// The error is a *ValidationError naming the first offending field ("/" for
// a document that is not JSON), or the schema's compile error.
func ValidateAgainst(name string, b []byte) error {
	_, err := validateDoc(name, b)
	return err
}

// validateDoc is ValidateAgainst returning the decoded document as well.
func validateDoc(name string, b []byte) (any, error) {
	s, err := Schema(name)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, &ValidationError{Field: "/", Reason: "not JSON: " + err.Error()}
	}
	return doc, FromSchemaError(s.Validate(doc))
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
