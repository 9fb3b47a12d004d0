package mcpconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// rawServer is an entry as written. Transport and BaseURL are the agent
// orchestrator's names for type and url.
type rawServer struct {
	Type            string            `json:"type"`
	Transport       string            `json:"transport"`
	Command         string            `json:"command"`
	Args            []string          `json:"args"`
	Env             map[string]any    `json:"env"`
	EnvFile         string            `json:"envFile"`
	Cwd             string            `json:"cwd"`
	URL             string            `json:"url"`
	BaseURL         string            `json:"baseURL"`
	Headers         map[string]string `json:"headers"`
	Disabled        bool              `json:"disabled"`
	Description     string            `json:"description"`
	ProtocolVersion string            `json:"protocolVersion"`
	Capabilities    []string          `json:"capabilities"`
	Timeout         json.RawMessage   `json:"timeout"`
	TTLMs           *int64            `json:"ttlMs"`
	SchemaVersion   string            `json:"schemaVersion"`
	OAuth           *rawOAuth         `json:"oauth"`
	// Enabled is the per-entry switch some clients write; false disables.
	Enabled *bool `json:"enabled"`
	// Keys VS Code writes that mean nothing to the relay: dev (watch and
	// debug settings), gallery and version (servers added from its gallery).
	Dev     json.RawMessage `json:"dev"`
	Gallery json.RawMessage `json:"gallery"`
	Version json.RawMessage `json:"version"`
}

// MinToolsTTL and MaxToolsTTL bound a server entry's ttlMs.
const (
	MinToolsTTL = time.Second
	MaxToolsTTL = 24 * time.Hour
)

var (
	nameRE          = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	schemaVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	envNameRE       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	secretNameRE    = regexp.MustCompile(`(?i)token|key|secret|password|passwd|credential`)
)

// entry collects one server's problems, each at the place of its field.
type entry struct {
	doc     *document
	name    string
	off     int
	members fields
	opts    Options
	errs    []error
	secrets map[string]bool
}

func (e *entry) fail(fieldName, format string, args ...any) {
	off := e.off
	top, _, _ := strings.Cut(fieldName, ".")
	top, _, _ = strings.Cut(top, "[")
	if f, ok := e.members.get(top); ok {
		off = f.off
	}
	e.errs = append(e.errs, e.doc.errorAt(off, e.name, fieldName, fmt.Sprintf(format, args...)))
}

// sub substitutes the variables of one value; values that came from
// ${env:…} or ${input:…} become the server's secrets.
func (e *entry) sub(fieldName, v string, bare bool) string {
	out, used, err := substitute(v, e.opts, bare)
	if err != nil {
		e.fail(fieldName, "%v", err)
	}
	for _, u := range used {
		e.secret(u)
	}
	return out
}

func (e *entry) secret(v string) {
	if len(v) >= minSecretLen {
		e.secrets[v] = true
	}
}

// minSecretLen keeps short values ("1", "true") from being redacted
// everywhere in results.
const minSecretLen = 6

// foreignKeys are per-entry keys other MCP clients write that mean nothing
// to the relay: they are ignored with one information line (File.Notes).
// Cline and Roo Code: autoApprove, alwaysAllow, disabledTools,
// transportType, networkTimeout, watchPaths; Gemini CLI and Qwen: trust,
// includeTools, excludeTools; Claude Code and Cursor: icon, name, notes,
// auth, sandbox; Windsurf: disabledTools; VS Code: roots, sandboxEnabled.
var foreignKeys = map[string]bool{
	"autoApprove": true, "alwaysAllow": true, "disabledTools": true, "transportType": true,
	"networkTimeout": true, "watchPaths": true, "trust": true, "includeTools": true,
	"excludeTools": true, "icon": true, "name": true, "notes": true, "auth": true,
	"sandbox": true, "sandboxEnabled": true, "roots": true, "$schema": true, "comment": true,
	"autoStart": true, "restartOnFailure": true, "inputs": true, "metadata": true,
}

func parseServer(doc *document, f field, opts Options) (Server, []string, []error) {
	e := &entry{doc: doc, name: f.name, off: f.off, opts: opts, secrets: map[string]bool{}}
	e.members, _ = doc.fields(f.valOff, f.raw)
	switch {
	case strings.TrimSpace(f.name) == "":
		e.fail("", "name is empty")
	case len(f.name) > MaxNameLen:
		e.fail("", "name is %d characters long, at most %d allowed", len(f.name), MaxNameLen)
	}
	raw, notes := f.raw, []string(nil)
	for _, m := range e.members {
		if foreignKeys[m.name] {
			notes = append(notes, m.name)
		}
	}
	if len(notes) > 0 {
		var obj map[string]json.RawMessage
		if json.Unmarshal(f.raw, &obj) == nil {
			for _, k := range notes {
				delete(obj, k)
			}
			raw, _ = json.Marshal(obj)
		}
	}
	r, ok := e.decode(raw)
	if !ok {
		return Server{}, nil, e.errs
	}
	line, _ := doc.pos(f.off)
	s := Server{
		Name:          ServerID(f.name),
		DisplayName:   f.name,
		Disabled:      r.Disabled || r.Enabled != nil && !*r.Enabled,
		Description:   r.Description,
		Capabilities:  r.Capabilities,
		SchemaVersion: r.SchemaVersion,
		Line:          line,
	}
	e.common(r, &s)
	switch e.transport(r, &s); s.Type {
	case Stdio:
		e.stdio(r, &s)
	case HTTP, SSE:
		e.remote(r, &s)
	}
	e.oauth(r, &s)
	for v := range e.secrets {
		s.Secrets = append(s.Secrets, v)
	}
	sort.Strings(s.Secrets)
	if len(e.errs) > 0 {
		return Server{}, nil, e.errs
	}
	return s, notes, nil
}

// decode reads the entry strictly: unknown fields and wrong types are errors.
func (e *entry) decode(raw json.RawMessage) (rawServer, bool) {
	var r rawServer
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(&r)
	if err == nil {
		return r, true
	}
	var ute *json.UnmarshalTypeError
	switch {
	case errors.As(err, &ute):
		e.fail(ute.Field, "wrong type: want %s", ute.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		e.fail(strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "unknown field")
	default:
		e.fail("", "not an object: %v", err)
	}
	return r, false
}

// common reads the fields every transport has.
func (e *entry) common(r rawServer, s *Server) {
	s.ProtocolVersion = r.ProtocolVersion
	if r.ProtocolVersion != "" && !slices.Contains(ProtocolVersions, r.ProtocolVersion) {
		e.fail("protocolVersion", "%q is not a version the relay speaks (%s); leave it out to negotiate",
			r.ProtocolVersion, strings.Join(ProtocolVersions, ", "))
	}
	if r.SchemaVersion != "" && !schemaVersionRE.MatchString(r.SchemaVersion) {
		e.fail("schemaVersion", "%q is not a version like 1.0.0", r.SchemaVersion)
	}
	for i, c := range r.Capabilities {
		if strings.TrimSpace(c) == "" {
			e.fail(fmt.Sprintf("capabilities[%d]", i), "empty")
		}
	}
	if len(r.Timeout) > 0 && string(r.Timeout) != "null" {
		d, err := parseTimeout(r.Timeout)
		switch {
		case err != nil:
			e.fail("timeout", "%v", err)
		case d < MinTimeout || d > MaxTimeout:
			e.fail("timeout", "%s is outside %s..%s", d, MinTimeout, MaxTimeout)
		default:
			s.Timeout = d
		}
	}
	if r.TTLMs != nil {
		d := time.Duration(*r.TTLMs) * time.Millisecond
		if d < MinToolsTTL || d > MaxToolsTTL {
			e.fail("ttlMs", "%d is outside %d..%d (milliseconds)", *r.TTLMs, MinToolsTTL.Milliseconds(), MaxToolsTTL.Milliseconds())
		} else {
			s.ToolsTTL = d
		}
	}
}

// parseTimeout reads "30s" (a Go duration) or a number of seconds.
func parseTimeout(raw json.RawMessage) (time.Duration, error) {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		d, err := time.ParseDuration(str)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration like 30s", str)
		}
		return d, nil
	}
	var secs float64
	if err := json.Unmarshal(raw, &secs); err != nil {
		return 0, errors.New("want a duration like \"30s\" or a number of seconds")
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// transport sets s.Type from type (or transport), else from command or url.
func (e *entry) transport(r rawServer, s *Server) {
	t, fieldName := r.Type, "type"
	if t == "" {
		t, fieldName = r.Transport, "transport"
	}
	switch strings.ToLower(t) {
	case "":
		s.TypeInferred = true
		switch {
		case r.Command != "":
			s.Type = Stdio
		case r.URL != "" || r.BaseURL != "":
			s.Type = HTTP
		default:
			e.fail("command", "required (or url for a remote server)")
		}
	case "stdio":
		s.Type = Stdio
	case "http", "streamable-http", "streamablehttp":
		s.Type = HTTP
	case "sse":
		s.Type = SSE
	default:
		e.fail(fieldName, "unknown type %q (want stdio, http or sse)", t)
	}
}

// stdio reads a stdio server's command, args, cwd, envFile and env.
func (e *entry) stdio(r rawServer, s *Server) {
	if strings.TrimSpace(r.Command) == "" {
		e.fail("command", "required for a stdio server")
	}
	if r.URL != "" || r.BaseURL != "" {
		e.fail(cmpField(r.URL != "", "url", "baseURL"), "not allowed for a stdio server")
	}
	s.Command = e.sub("command", r.Command, false)
	s.Dir = e.sub("cwd", r.Cwd, false)
	for i, a := range r.Args {
		s.Args = append(s.Args, e.sub(fmt.Sprintf("args[%d]", i), a, false))
	}
	s.EnvFile = e.sub("envFile", r.EnvFile, false)
	if s.EnvFile != "" {
		s.Env = e.envFile(s.EnvFile)
	}
	e.env(r.Env, s)
}

// remote reads an http or sse server's url and headers.
func (e *entry) remote(r rawServer, s *Server) {
	raw, fieldName := r.URL, "url"
	if raw == "" {
		raw, fieldName = r.BaseURL, "baseURL"
	}
	if r.Command != "" {
		e.fail("command", "not allowed for a %s server", s.Type)
	}
	if raw == "" {
		e.fail("url", "required for a %s server", s.Type)
		return
	}
	s.URL = e.sub(fieldName, raw, false)
	if s.URL != "" {
		if err := checkURL(s.URL); err != nil {
			e.fail(fieldName, "%v", err)
		}
	}
	if len(r.Headers) > 0 {
		s.Headers = make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			s.Headers[k] = e.sub("headers."+k, v, false)
			if secretNameRE.MatchString(k) || strings.EqualFold(k, "Authorization") {
				e.secret(s.Headers[k])
			}
		}
	}
	e.env(r.Env, s)
}

func cmpField(first bool, a, b string) string {
	if first {
		return a
	}
	return b
}

// ErrNamedPipe is the reason a pipe:// URL is refused.
const errNamedPipe = "Windows named pipes are not supported on this platform"

// checkURL accepts http(s) URLs with a host and unix:// URLs with a path.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a valid URL")
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return errors.New("not a valid http(s) URL: no host")
		}
	case "unix":
		if sock, _ := UnixSocket(u); sock == "" || sock == "/" {
			return errors.New("unix:// URL without a socket path (want unix:///path/to.sock)")
		}
	case "pipe":
		return errors.New(errNamedPipe)
	default:
		return errors.New("not a valid http(s) or unix:// URL")
	}
	return nil
}

// UnixSocket splits a unix:// URL into the socket's path and the HTTP path:
// the fragment when there is one ("unix:///run/mcp.sock#/mcp"), else what
// follows a path element ending in ".sock" ("unix:///run/mcp.sock/mcp"),
// else "/".
func UnixSocket(u *url.URL) (sock, httpPath string) {
	p := u.Path
	if u.Host != "" && u.Host != "localhost" {
		p = "/" + u.Host + p // unix://run/mcp.sock written with two slashes
	}
	if u.Fragment != "" {
		return p, "/" + strings.TrimPrefix(u.Fragment, "/")
	}
	if i := strings.Index(p, ".sock/"); i >= 0 {
		return p[:i+5], p[i+5:]
	}
	return p, "/"
}

// env reads the env object: strings (with ${VAR} meaning ${env:VAR}),
// numbers and booleans.
func (e *entry) env(raw map[string]any, s *Server) {
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if !envNameRE.MatchString(k) {
			e.fail("env."+k, "not a valid environment variable name")
			continue
		}
		var v string
		switch x := raw[k].(type) {
		case string:
			v = x
		case float64, bool:
			v = fmt.Sprint(x)
		case nil:
			continue
		default:
			e.fail("env."+k, "must be a string")
			continue
		}
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[k] = e.sub("env."+k, v, true)
		if secretNameRE.MatchString(k) {
			e.secret(s.Env[k])
		}
	}
}

// envFile reads a dotenv file (relative to the mcp.json's directory).
func (e *entry) envFile(p string) map[string]string {
	if !filepath.IsAbs(p) && e.opts.BaseDir != "" {
		p = filepath.Join(e.opts.BaseDir, p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		e.fail("envFile", "%v", err)
		return nil
	}
	vars, err := ParseEnvFile(data)
	if err != nil {
		e.fail("envFile", "%s: %v", p, err)
		return nil
	}
	for k, v := range vars {
		if secretNameRE.MatchString(k) {
			e.secret(v)
		}
	}
	return vars
}
