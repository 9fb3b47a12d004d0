package mcpconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/tailscale/hujson"
)

// The top-level keys holding servers, in the order they are read.
var serverKeys = []string{"servers", "mcpServers"}

// Parse validates an mcp.json document (JSON or JSONC) and returns its
// servers in file order ("servers" first, then "mcpServers"); every entry
// must be valid. Every problem is reported, each as a *ValidationError with
// its line and column, joined. ParseFile reads entry by entry.
func Parse(data []byte, opts Options) ([]Server, error) {
	f, err := ParseFile(data, opts)
	if err != nil {
		return nil, err
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return f.Servers, nil
}

// ParseFile reads an mcp.json document entry by entry: a bad entry goes to
// File.Invalid with its reasons and the others load. The error is set only
// when the document as a whole cannot be read: not JSON or JSONC (with its
// line and column), not an object, a server list that is not an object,
// bad inputs, or no server list at all. Top-level keys other than servers,
// mcpServers and inputs are ignored (the settings Claude Desktop and
// Cursor keep in the same file).
func ParseFile(data []byte, opts Options) (*File, error) {
	if opts.Lookup == nil {
		opts.Lookup = os.LookupEnv
	}
	// Standardize turns comments and trailing commas into spaces, so byte
	// offsets in std are offsets in the file.
	std, err := hujson.Standardize(bytes.Clone(data))
	if err != nil {
		return nil, syntaxError(err)
	}
	doc := &document{data: std}
	top, err := doc.fields(0, std)
	if err != nil {
		return nil, &ValidationError{Reason: "not a JSON object: " + err.Error()}
	}
	inputs, errs := doc.inputs(top)
	opts.inputs = inputs
	type keyed struct {
		field
		key string
	}
	var entries []keyed
	f := &File{}
	invalid := func(e field, errs ...error) {
		line, _ := doc.pos(e.off)
		f.Invalid = append(f.Invalid, Invalid{Name: e.name, ID: ServerID(e.name), Line: line, Err: errors.Join(errs...)})
	}
	seen := map[string]string{}
	hasServers := false
	for _, key := range serverKeys {
		fl, ok := top.get(key)
		if !ok || string(fl.raw) == "null" {
			continue
		}
		hasServers = true
		list, err := doc.fields(fl.valOff, fl.raw)
		if err != nil {
			errs = append(errs, doc.errorAt(fl.off, "", key, "must be an object of servers: "+err.Error()))
			continue
		}
		for _, e := range list {
			if other, dup := seen[e.name]; dup {
				reason := fmt.Sprintf("defined in both %q and %q", other, key)
				if other == key {
					reason = fmt.Sprintf("defined twice in %q (server names must be unique)", key)
				}
				invalid(e, doc.errorAt(e.off, e.name, "", reason))
				continue
			}
			seen[e.name] = key
			entries = append(entries, keyed{e, key})
		}
	}
	if !hasServers && len(top) > 0 && !top.has("inputs") && !top.has("$schema") {
		errs = append(errs, &ValidationError{Reason: "no \"servers\" (VS Code) or \"mcpServers\" (Claude Desktop, Cursor) object"})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	ids := map[string]string{} // id -> entry name
	for _, e := range entries {
		s, notes, serr := parseServer(doc, e.field, opts)
		if serr == nil {
			// The schema is a backstop for what the Go checks do not cover.
			if err := validateSchema(ConfigSchema, entryDoc(e.key, e.name, e.raw)); err != nil {
				serr = []error{withPlace(err, doc, e.off, e.name)}
			}
		}
		if serr == nil {
			if other, dup := ids[s.Name]; dup {
				serr = []error{doc.errorAt(e.off, e.name, "", fmt.Sprintf("its id %q is the id of server %q: rename one of them", s.Name, other))}
			}
		}
		if serr != nil {
			invalid(e.field, serr...)
			continue
		}
		ids[s.Name] = e.name
		if len(notes) > 0 {
			f.Notes = append(f.Notes, fmt.Sprintf("server %q: ignored %s (%s)", e.name, strings.Join(notes, ", "), "keys of other MCP clients that mean nothing to the relay"))
		}
		f.Servers = append(f.Servers, s)
	}
	dedupe(f.Servers)
	return f, nil
}

// entryDoc is a document holding one entry, for the schema check.
func entryDoc(key, name string, raw json.RawMessage) []byte {
	k, _ := json.Marshal(key)
	n, _ := json.Marshal(name)
	return slices.Concat([]byte("{"), k, []byte(":{"), n, []byte(":"), raw, []byte("}}"))
}

// withPlace gives a schema error the entry's place.
func withPlace(err error, doc *document, off int, name string) error {
	var ve *ValidationError
	if errors.As(err, &ve) {
		c := *ve
		c.Line, c.Column = doc.pos(off)
		c.Server = name
		return &c
	}
	return doc.errorAt(off, name, "", err.Error())
}

var hujsonPosRE = regexp.MustCompile(`^hujson: line (\d+), column (\d+): (.*)$`)

// syntaxError turns hujson's error into a ValidationError with its place.
func syntaxError(err error) error {
	ve := &ValidationError{Reason: "not valid JSON or JSONC: " + err.Error()}
	if m := hujsonPosRE.FindStringSubmatch(err.Error()); m != nil {
		ve.Line, _ = strconv.Atoi(m[1])
		ve.Column, _ = strconv.Atoi(m[2])
		ve.Reason = "not valid JSON or JSONC: " + m[3]
	}
	return ve
}

// document is a standardized mcp.json with a way back from byte offsets to
// lines and columns.
type document struct {
	data []byte
}

// field is one member of a JSON object: its name, raw value and the byte
// offset of its name in the document.
type field struct {
	name   string
	raw    json.RawMessage
	off    int // of the name
	valOff int // of the value
}

type fields []field

func (fs fields) get(name string) (field, bool) {
	for _, f := range fs {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}

func (fs fields) has(name string) bool { _, ok := fs.get(name); return ok }

// fields returns the members of the object raw (at offset base) in
// document order.
func (d *document) fields(base int, raw []byte) (fields, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if delim, ok := tok.(json.Delim); !ok || delim != '{' {
		return nil, errors.New("not an object")
	}
	var out fields
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		end := int(dec.InputOffset())
		off := base + max(0, end-len(name)-2)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, field{name: name, raw: v, off: off, valOff: base + int(dec.InputOffset()) - len(v)})
	}
	return out, nil
}

// pos is the 1-based line and column of a byte offset.
func (d *document) pos(off int) (line, col int) {
	off = min(max(off, 0), len(d.data))
	line = 1 + bytes.Count(d.data[:off], []byte("\n"))
	col = off - bytes.LastIndexByte(d.data[:off], '\n')
	return line, col
}

func (d *document) errorAt(off int, server, fieldName, reason string) *ValidationError {
	line, col := d.pos(off)
	return &ValidationError{Line: line, Column: col, Server: server, Field: fieldName, Reason: reason}
}

// input is one VS Code input declaration.
type input struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Default string `json:"default"`
}

// inputs reads the top-level "inputs" array.
func (d *document) inputs(top fields) (map[string]input, []error) {
	f, ok := top.get("inputs")
	if !ok || string(f.raw) == "null" {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(f.raw, &list); err != nil {
		return nil, []error{d.errorAt(f.off, "", "inputs", "must be an array of inputs")}
	}
	out := map[string]input{}
	var errs []error
	for i, raw := range list {
		var in input
		field := fmt.Sprintf("inputs[%d]", i)
		switch err := json.Unmarshal(raw, &in); {
		case err != nil:
			errs = append(errs, d.errorAt(f.off, "", field, "must be an object with id and type"))
		case in.ID == "":
			errs = append(errs, d.errorAt(f.off, "", field+".id", "required"))
		default:
			out[in.ID] = in
		}
	}
	return out, errs
}
