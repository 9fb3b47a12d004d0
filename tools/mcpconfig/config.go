// Package mcpconfig loads the tool runner's two files: mcp.json, the list of
// MCP servers, and the policy file (YAML or JSON) with role capabilities,
// budgets and global limits.
//
// mcp.json is read as JSONC (comments and trailing commas, as VS Code writes
// it) in every common layout: VS Code's top-level "servers" with "inputs"
// (${input:id}), Claude Desktop's and Cursor's "mcpServers" (their other
// top-level keys, such as globalShortcut or preferences, are ignored), and
// the agent orchestrator's per-server fields (transport, baseURL,
// capabilities, timeout, schemaVersion).
//
// Both files are validated against their JSON Schemas in package schemas and
// then by Go checks whose errors name the file, line and column, the server
// (or role, or budget) and the field.
// The package does no I/O beyond reading the files it is given; environment
// lookups go through Options.Lookup.
package mcpconfig

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/relaystation/relay/envelope"
)

// ConfigSchema and PolicySchema are the file names of the schemas inside schemas.FS.
const (
	ConfigSchema = "mcp-config.schema.json"
	PolicySchema = "policy.schema.json"
)

// Protocol versions. An entry without "protocolVersion" is negotiated: the
// runner speaks LatestProtocolVersion (server/discover) and falls back to
// the initialize handshake at DefaultProtocolVersion, which the server may
// answer with an older version it speaks (docs/protocol.md). An entry that
// sets "protocolVersion" pins it: the handshake asks for that version only
// and fails when the server answers another.
const (
	LatestProtocolVersion = "2026-07-28"
	// DefaultProtocolVersion is the version of the initialize handshake the
	// negotiation falls back to (and what tests pin for a 2025 handshake).
	DefaultProtocolVersion = "2025-11-25"
)

// ProtocolVersions are the versions an entry may pin, newest first.
var ProtocolVersions = []string{LatestProtocolVersion, DefaultProtocolVersion, "2025-06-18", "2025-03-26", "2024-11-05"}

// Transport is how the runner reaches a server.
type Transport string

// The transports of an mcp.json entry.
const (
	Stdio Transport = "stdio"
	HTTP  Transport = "http" // streamable HTTP
	SSE   Transport = "sse"  // the older HTTP+SSE transport
)

// Remote reports whether t reaches its server over HTTP (http or sse: an
// OAuth login applies to it).
func Remote(t Transport) bool { return t == HTTP || t == SSE }

// Server is one validated, substituted mcp.json entry.
type Server struct {
	// Name is the entry's tool-safe id, ServerID of its key: letters,
	// digits, '-' and '_'. Tools are called as "<Name>.<tool>".
	Name string
	// DisplayName is the entry's key as written ("microsoft/playwright-mcp",
	// "Dev Box MCP"); it equals Name for keys that are already tool-safe.
	DisplayName string
	// Type is the transport, inferred from Command or URL when the entry has
	// none (TypeInferred is then set).
	Type         Transport
	TypeInferred bool
	// Command, Args, Env and Dir start a stdio server. Env holds the entry's
	// env (over the variables of EnvFile); the runner adds a minimal base
	// environment, never the relay's own secrets.
	Command string
	Args    []string
	Env     map[string]string
	EnvFile string
	Dir     string
	// URL and Headers reach a remote server. URL is http(s):// or
	// unix:///path/to.sock (HTTP over a Unix socket; the fragment, as in
	// unix:///run/mcp.sock#/mcp, is the HTTP path).
	URL     string
	Headers map[string]string
	// Disabled servers are listed but not started. Duplicates are disabled
	// with Description "Duplicate of X".
	Disabled    bool
	Description string
	// ProtocolVersion is the MCP version the entry pins; "" negotiates
	// (LatestProtocolVersion, else the server's best 2025 version).
	ProtocolVersion string
	// Timeout bounds one call when the policy sets no timeout budget for the
	// server or tool (the orchestrator's "timeout"); 0 means the default.
	Timeout time.Duration
	// ToolsTTL is how long the runner caches the server's tool list (the
	// entry's "ttlMs"); 0 means the server's own ttlMs, else the runner's
	// default (5 minutes).
	ToolsTTL time.Duration
	// Capabilities and SchemaVersion are the orchestrator's declarations,
	// kept for display (role capabilities live in the policy file).
	Capabilities  []string
	SchemaVersion string
	// Secrets are the values that came from ${input:…} and ${env:…}
	// substitution or from env entries whose names say secret (token, key,
	// secret, password): the runner redacts them from this server's results.
	Secrets []string
	// Line is where the entry starts in the file (1-based; 0 when unknown).
	Line int
	// OAuth is the entry's "oauth" object, nil without one.
	OAuth *OAuth
}

// MaxNameLen bounds server and tool names.
const MaxNameLen = 100

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
	// Lookup reads environment variables for ${env:NAME}, ${NAME} in env
	// values and ${input:id} (from the variable InputEnvName(id)); nil means
	// os.LookupEnv.
	Lookup func(string) (string, bool)
	// DataDir replaces ${dataDir}.
	DataDir string
	// BaseDir resolves a relative envFile; Load sets it to the file's directory.
	BaseDir string
	// Workspace replaces ${workspaceFolder} (and its base name
	// ${workspaceFolderBasename}). Load sets it from RELAY_WORKSPACE, else
	// WorkspaceOf(path).
	Workspace string
	// Home replaces ${userHome}; empty means os.UserHomeDir.
	Home string

	inputs map[string]input // the file's VS Code inputs, by id
}

// ErrNotFound is returned (wrapped) by Load when the file does not exist.
var ErrNotFound = errors.New("mcp config not found")

// ValidationError names the server (or role, or budget), the field and the
// problem. Path is the file, Line and Column the place in it, when known.
type ValidationError struct {
	Path         string
	Line, Column int
	Server       string
	Field        string
	Reason       string
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	switch {
	case e.Path != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.Path, e.Line, e.Column)
	case e.Path != "":
		b.WriteString(e.Path + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
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

// Load reads and validates the mcp.json at path: every entry must be
// valid (LoadFile reads entry by entry). A missing file is an error
// wrapping ErrNotFound (the caller decides whether a missing default file
// means "no servers").
func Load(path string, opts Options) ([]Server, error) {
	f, err := LoadFile(path, opts)
	if err != nil {
		return nil, err
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return f.Servers, nil
}

// WorkspaceEnv names the folder ${workspaceFolder} stands for.
const WorkspaceEnv = "RELAY_WORKSPACE"

// WorkspaceOf is the workspace folder of the mcp.json at path, as VS Code
// and Cursor see it: the folder holding .vscode or .cursor when the file
// lives in one, else the file's own folder.
func WorkspaceOf(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	dir := filepath.Dir(abs)
	switch filepath.Base(dir) {
	case ".vscode", ".cursor":
		return filepath.Dir(dir)
	}
	return dir
}

// WithPath gives the *ValidationErrors in err (joined or not) the file
// path; other errors are prefixed with it.
func WithPath(err error, path string) error { return withPath(err, path) }

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

// validateSchema checks a JSON document against one of the embedded schemas
// and returns a *ValidationError naming the first offending field.
func validateSchema(name string, data []byte) error {
	err := envelope.ValidateAgainst(name, data)
	var ve *envelope.ValidationError
	if errors.As(err, &ve) {
		return &ValidationError{Field: ve.Field, Reason: ve.Reason}
	}
	return err
}
