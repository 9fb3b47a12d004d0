// Package mcpconfig loads the tool runner's two files: mcp.json, the list of
// MCP servers (in the VS Code layout with a top-level "servers" object or the
// Claude Desktop / Cursor layout with "mcpServers"), and the policy file
// (YAML or JSON) with role capabilities, budgets and global limits.
//
// Both are validated against their JSON Schemas in package schemas and then
// by Go checks whose errors name the server (or role, or budget) and field.
// The package does no I/O beyond reading the files it is given; environment
// lookups go through Options.Lookup.
package mcpconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relaystation/relay/envelope"
)

// ConfigSchema and PolicySchema are the file names of the schemas inside schemas.FS.
const (
	ConfigSchema = "mcp-config.schema.json"
	PolicySchema = "policy.schema.json"
)

// DefaultProtocolVersion is the MCP protocol version requested unless a
// server entry sets "protocolVersion": the initialize handshake, which every
// server speaks. Newer versions (2026-07-28) first probe server/discover,
// which some stdio servers answer by exiting.
const DefaultProtocolVersion = "2025-11-25"

// Transport is how the runner reaches a server.
type Transport string

// The transports of an mcp.json entry.
const (
	Stdio Transport = "stdio"
	HTTP  Transport = "http" // streamable HTTP
	SSE   Transport = "sse"  // the older HTTP+SSE transport
)

// Server is one validated, substituted mcp.json entry.
type Server struct {
	// Name is the entry's key: letters, digits, '-' and '_'. Tools are called
	// as "<Name>.<tool>".
	Name string
	// Type is the transport, inferred from Command or URL when the entry has none.
	Type Transport
	// Command, Args, Env and Dir start a stdio server. Env holds the entry's
	// env (over the variables of EnvFile); the runner adds a minimal base
	// environment, never the relay's own secrets.
	Command string
	Args    []string
	Env     map[string]string
	EnvFile string
	Dir     string
	// URL and Headers reach a remote server.
	URL     string
	Headers map[string]string
	// Disabled servers are listed but not started. Duplicates are disabled
	// with Description "Duplicate of X".
	Disabled    bool
	Description string
	// ProtocolVersion is the MCP version requested; DefaultProtocolVersion
	// when the entry sets none.
	ProtocolVersion string
}

// Identity is what makes two entries the same server:
// "stdio:{command}:{args joined by |}" or "remote:{url}".
func (s *Server) Identity() string {
	if s.Type == Stdio {
		return "stdio:" + s.Command + ":" + strings.Join(s.Args, "|")
	}
	return "remote:" + s.URL
}

// Options say how values are substituted.
type Options struct {
	// Lookup reads environment variables for ${env:NAME} and ${input:id};
	// nil means os.LookupEnv.
	Lookup func(string) (string, bool)
	// DataDir replaces ${dataDir}.
	DataDir string
	// BaseDir resolves a relative envFile; Load sets it to the file's directory.
	BaseDir string
}

// ErrNotFound is returned (wrapped) by Load when the file does not exist.
var ErrNotFound = errors.New("mcp config not found")

// ValidationError names the server (or role, or budget), the field and the
// problem. Path is the file, when known.
type ValidationError struct {
	Path   string
	Server string
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	if e.Server != "" {
		fmt.Fprintf(&b, "server %q: ", e.Server)
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Load reads and validates the mcp.json at path. A missing file is an error
// wrapping ErrNotFound (the caller decides whether a missing default file
// means "no servers").
func Load(path string, opts Options) ([]Server, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", path, ErrNotFound)
		}
		return nil, fmt.Errorf("read mcp config: %w", err)
	}
	if opts.BaseDir == "" {
		opts.BaseDir = filepath.Dir(path)
	}
	servers, err := Parse(data, opts)
	if err != nil {
		return nil, withPath(err, path)
	}
	return servers, nil
}

func withPath(err error, path string) error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		errs := joined.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = withPath(e, path)
		}
		return errors.Join(out...)
	}
	var ve *ValidationError
	if errors.As(err, &ve) && ve.Path == "" {
		c := *ve
		c.Path = path
		return &c
	}
	return fmt.Errorf("%s: %w", path, err)
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// rawServer is an entry as written.
type rawServer struct {
	Type            string            `json:"type"`
	Command         string            `json:"command"`
	Args            []string          `json:"args"`
	Env             map[string]any    `json:"env"`
	EnvFile         string            `json:"envFile"`
	Cwd             string            `json:"cwd"`
	URL             string            `json:"url"`
	Headers         map[string]string `json:"headers"`
	Disabled        bool              `json:"disabled"`
	Description     string            `json:"description"`
	ProtocolVersion string            `json:"protocolVersion"`
}

// Parse validates an mcp.json document and returns its servers in file
// order ("servers" first, then "mcpServers"). Every problem is reported, each
// as a *ValidationError, joined.
func Parse(data []byte, opts Options) ([]Server, error) {
	if opts.Lookup == nil {
		opts.Lookup = os.LookupEnv
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, &ValidationError{Reason: "not a JSON object: " + err.Error()}
	}
	var errs []error
	type entry struct {
		name string
		raw  json.RawMessage
	}
	var entries []entry
	seen := map[string]string{}
	for _, key := range []string{"servers", "mcpServers"} {
		raw, ok := top[key]
		if !ok || string(raw) == "null" {
			continue
		}
		names, err := orderedKeys(raw)
		if err != nil {
			errs = append(errs, &ValidationError{Field: key, Reason: "must be an object of servers: " + err.Error()})
			continue
		}
		var m map[string]json.RawMessage
		_ = json.Unmarshal(raw, &m)
		for _, n := range names {
			if other, dup := seen[n]; dup {
				errs = append(errs, &ValidationError{Server: n, Reason: fmt.Sprintf("defined in both %q and %q", other, key)})
				continue
			}
			seen[n] = key
			entries = append(entries, entry{n, m[n]})
		}
	}
	for k := range top {
		if k != "servers" && k != "mcpServers" && k != "inputs" && k != "$schema" {
			errs = append(errs, &ValidationError{Field: k, Reason: "unknown top-level key (want servers or mcpServers)"})
		}
	}
	servers := make([]Server, 0, len(entries))
	for _, e := range entries {
		s, serr := parseServer(e.name, e.raw, opts)
		if serr != nil {
			errs = append(errs, serr...)
			continue
		}
		servers = append(servers, s)
	}
	if len(errs) == 0 {
		// The schema is a backstop for what the Go checks above do not cover.
		if err := validateSchema(ConfigSchema, data); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	dedupe(servers)
	return servers, nil
}

func parseServer(name string, raw json.RawMessage, opts Options) (Server, []error) {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, &ValidationError{Server: name, Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if !nameRE.MatchString(name) {
		fail("", "name must be letters, digits, '-' or '_'")
	}
	var r rawServer
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, &ute):
			fail(ute.Field, "wrong type: want %s", ute.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			fail(strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "unknown field")
		default:
			fail("", "not an object: %v", err)
		}
		return Server{}, errs
	}
	sub := func(field, v string) string {
		out, err := substitute(v, opts)
		if err != nil {
			fail(field, "%v", err)
		}
		return out
	}
	s := Server{
		Name:            name,
		Command:         sub("command", r.Command),
		URL:             sub("url", r.URL),
		EnvFile:         sub("envFile", r.EnvFile),
		Dir:             sub("cwd", r.Cwd),
		Disabled:        r.Disabled,
		Description:     r.Description,
		ProtocolVersion: r.ProtocolVersion,
	}
	for i, a := range r.Args {
		s.Args = append(s.Args, sub(fmt.Sprintf("args[%d]", i), a))
	}
	switch t := strings.ToLower(r.Type); t {
	case "":
		switch {
		case r.Command != "":
			s.Type = Stdio
		case r.URL != "":
			s.Type = HTTP
		default:
			fail("command", "required (or url for a remote server)")
		}
	case "stdio":
		s.Type = Stdio
	case "http", "streamable-http", "streamablehttp":
		s.Type = HTTP
	case "sse":
		s.Type = SSE
	default:
		fail("type", "unknown type %q (want stdio, http or sse)", r.Type)
	}
	switch s.Type {
	case Stdio:
		if strings.TrimSpace(r.Command) == "" {
			fail("command", "required for a stdio server")
		}
		if r.URL != "" {
			fail("url", "not allowed for a stdio server")
		}
	case HTTP, SSE:
		if r.URL == "" {
			fail("url", "required for a %s server", s.Type)
		} else if u, err := url.Parse(s.URL); s.URL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			fail("url", "not a valid http(s) URL")
		}
		if r.Command != "" {
			fail("command", "not allowed for a %s server", s.Type)
		}
	}
	if r.ProtocolVersion == "" {
		s.ProtocolVersion = DefaultProtocolVersion
	} else if !versionRE.MatchString(r.ProtocolVersion) {
		fail("protocolVersion", "%q is not a date version like 2025-11-25", r.ProtocolVersion)
	}
	if s.EnvFile != "" {
		p := s.EnvFile
		if !filepath.IsAbs(p) && opts.BaseDir != "" {
			p = filepath.Join(opts.BaseDir, p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			fail("envFile", "%v", err)
		} else if vars, err := ParseEnvFile(data); err != nil {
			fail("envFile", "%v", err)
		} else {
			s.Env = vars
		}
	}
	keys := make([]string, 0, len(r.Env))
	for k := range r.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !envNameRE.MatchString(k) {
			fail("env."+k, "not a valid environment variable name")
			continue
		}
		var v string
		switch x := r.Env[k].(type) {
		case string:
			v = x
		case float64, bool:
			v = fmt.Sprint(x)
		case nil:
			continue
		default:
			fail("env."+k, "must be a string")
			continue
		}
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[k] = sub("env."+k, v)
	}
	if len(r.Headers) > 0 {
		s.Headers = make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			s.Headers[k] = sub("headers."+k, v)
		}
	}
	return s, errs
}

var (
	versionRE = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	varRE     = regexp.MustCompile(`\$\{([^}]*)\}`)
)

// substitute replaces ${env:NAME}, ${input:id} and ${dataDir}. A missing
// variable or an unknown form is an error naming it.
func substitute(s string, opts Options) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var errs []string
	out := varRE.ReplaceAllStringFunc(s, func(m string) string {
		inner := m[2 : len(m)-1]
		kind, arg, _ := strings.Cut(inner, ":")
		switch {
		case inner == "dataDir":
			return opts.DataDir
		case kind == "env" && arg != "":
			if v, ok := opts.Lookup(arg); ok {
				return v
			}
			errs = append(errs, fmt.Sprintf("environment variable %s is not set (${env:%s})", arg, arg))
		case kind == "input" && arg != "":
			name := InputEnvName(arg)
			if v, ok := opts.Lookup(name); ok {
				return v
			}
			errs = append(errs, fmt.Sprintf("input %q: environment variable %s is not set", arg, name))
		default:
			errs = append(errs, fmt.Sprintf("unknown variable %s (want ${env:NAME}, ${input:id} or ${dataDir})", m))
		}
		return m
	})
	if len(errs) > 0 {
		return "", errors.New(strings.Join(errs, "; "))
	}
	return out, nil
}

// InputEnvName is the environment variable that supplies ${input:id}: the id
// upper-cased with every character other than a letter or digit turned into
// '_' ("github-token" -> GITHUB_TOKEN).
func InputEnvName(id string) string {
	b := []byte(strings.ToUpper(id))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// ParseEnvFile reads a dotenv file: NAME=value lines, '#' comments, blank
// lines, an optional "export " prefix and single or double quotes around
// the value.
func ParseEnvFile(data []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || !envNameRE.MatchString(k) {
			return nil, fmt.Errorf("line %d: want NAME=value", i+1)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
			v = v[1 : len(v)-1]
		}
		out[k] = v
	}
	return out, nil
}

// dedupe disables every entry whose identity an earlier enabled entry has.
func dedupe(servers []Server) {
	first := map[string]string{}
	for i := range servers {
		s := &servers[i]
		if s.Disabled {
			continue
		}
		id := s.Identity()
		if orig, ok := first[id]; ok {
			s.Disabled = true
			s.Description = "Duplicate of " + orig
			continue
		}
		first[id] = s.Name
	}
}

// orderedKeys returns the keys of a JSON object in document order.
func orderedKeys(raw json.RawMessage) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not an object")
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		keys = append(keys, k)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

var (
	schemaMu    sync.Mutex
	schemaCache = map[string]*jsonschema.Schema{}
)

// validateSchema checks a JSON document against one of the embedded schemas
// and returns a *ValidationError naming the first offending field.
func validateSchema(name string, data []byte) error {
	schemaMu.Lock()
	s, ok := schemaCache[name]
	if !ok {
		var err error
		s, err = envelope.CompileSchema(name)
		if err != nil {
			schemaMu.Unlock()
			return err
		}
		schemaCache[name] = s
	}
	schemaMu.Unlock()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return &ValidationError{Reason: "not JSON: " + err.Error()}
	}
	if err := envelope.FromSchemaError(s.Validate(doc)); err != nil {
		var ve *envelope.ValidationError
		if errors.As(err, &ve) {
			return &ValidationError{Field: ve.Field, Reason: ve.Reason}
		}
		return err
	}
	return nil
}
