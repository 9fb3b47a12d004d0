package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relaystation/relay/tools/mcpconfig"
)

type wireError = jsonrpc.Error

// ToolInfo is what a caller (the agent) needs to offer a tool to a model.
type ToolInfo struct {
	// Name is "<server>.<tool>", the name tool_call envelopes use.
	Name        string `json:"name"`
	Server      string `json:"server"`
	Tool        string `json:"tool"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	// InputSchema is the tool's JSON Schema for its arguments.
	InputSchema any `json:"inputSchema"`
	// OutputSchema, when set, describes structured results.
	OutputSchema any `json:"outputSchema,omitempty"`
	// ReadOnly and Idempotent come from the tool's annotations; the runner
	// retries only such tools after the call may have reached the server.
	ReadOnly   bool `json:"readOnly,omitempty"`
	Idempotent bool `json:"idempotent,omitempty"`
	// ServerTTLMs is how long the server said its tool list may be cached
	// (its tools/list ttlMs, SEP-2549); 0 when it said nothing. Holders of
	// lists (the hooks' discovery cache) keep them no longer.
	ServerTTLMs int64 `json:"server_ttl_ms,omitempty"`
	// PerUser is set for a server whose entry says "oauth": {"per": "user"}:
	// a call runs with the connection of the person it acts for, so the
	// agent asks a person to approve each of its calls (docs/oauth.md).
	PerUser bool `json:"perUser,omitempty"`
}

// toolEntry is a cached tool with its compiled schemas.
type toolEntry struct {
	info ToolInfo

	once      sync.Once
	in, out   *jsonschema.Schema
	schemaErr error
	// shallow is in's direct check when in has that shape (shallow.go).
	shallow *shallowSchema
}

// safe reports whether repeating the call cannot cause a second effect.
func (e *toolEntry) safe() bool { return e.info.ReadOnly || e.info.Idempotent }

func (e *toolEntry) schemas() (*jsonschema.Schema, *jsonschema.Schema) {
	e.once.Do(func() {
		var err1, err2 error
		var doc any
		e.in, doc, err1 = compileSchemaDoc(e.info.Name+"/input.json", e.info.InputSchema)
		e.out, _, err2 = compileSchemaDoc(e.info.Name+"/output.json", e.info.OutputSchema)
		if e.in != nil {
			e.shallow = shallowOf(doc)
		}
		if err1 != nil {
			e.schemaErr = err1
		} else {
			e.schemaErr = err2
		}
	})
	return e.in, e.out
}

// validateArgs checks a call's arguments against the input schema: those
// the shallow check accepts are valid, the others go to the validator.
func (e *toolEntry) validateArgs(args map[string]any) error {
	in, _ := e.schemas()
	if e.shallow != nil && e.shallow.accepts(args) {
		return nil
	}
	return validate(in, args)
}

// compileToolSchema compiles a schema a server sent (any draft it names;
// draft-07 when it names none). nil for none.
func compileToolSchema(name string, schema any) (*jsonschema.Schema, error) {
	s, _, err := compileSchemaDoc(name, schema)
	return s, err
}

// compileSchemaDoc is compileToolSchema that also returns the decoded
// schema document.
func compileSchemaDoc(name string, schema any) (*jsonschema.Schema, any, error) {
	if schema == nil {
		return nil, nil, nil
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytesReader(b))
	if err != nil {
		return nil, nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	url := "mem://tools/" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, nil, err
	}
	s, err := c.Compile(url)
	return s, doc, err
}

// validate checks a decoded JSON value against s; nil s accepts anything.
func validate(s *jsonschema.Schema, v any) error {
	if s == nil {
		return nil
	}
	if !plain(v) {
		// Round-trip through JSON so the validator sees plain JSON types.
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if v, err = jsonschema.UnmarshalJSON(bytesReader(b)); err != nil {
			return err
		}
	}
	if err := s.Validate(v); err != nil {
		if ve, ok := err.(*jsonschema.ValidationError); ok {
			leaf := ve
			for len(leaf.Causes) > 0 {
				leaf = leaf.Causes[0]
			}
			return fmt.Errorf("at /%s: %s", joinPath(leaf.InstanceLocation), leaf.ErrorKind.LocalizedString(printer))
		}
		return err
	}
	return nil
}

// plain reports whether v holds only the types the validator takes as they are.
func plain(v any) bool {
	switch x := v.(type) {
	case nil, bool, float64, string, json.Number, int, int64:
		return true
	case float32:
		return true
	case map[string]any:
		for _, e := range x {
			if !plain(e) {
				return false
			}
		}
		return true
	case []any:
		for _, e := range x {
			if !plain(e) {
				return false
			}
		}
		return true
	}
	return false
}

// RefreshTools drops the cached tool list of the named server, or of every
// server when name is "", so the next list or call asks the server again
// (`relay mcp refresh`). It returns the servers refreshed; a name the runner
// does not have is ErrUnknownServer. Safe for concurrent use.
func (r *Runner) RefreshTools(name string) ([]string, error) {
	if name != "" {
		c := r.conn(name)
		if c == nil {
			return nil, fmt.Errorf("refresh %q: %w", name, ErrUnknownServer)
		}
		c.invalidateTools()
		return []string{name}, nil
	}
	conns := r.list()
	names := make([]string, 0, len(conns))
	for _, c := range conns {
		c.invalidateTools()
		names = append(names, c.cfg.Name)
	}
	return names, nil
}

// invalidateTools drops the cache (notifications/tools/list_changed,
// reconnect, reload, RefreshTools).
func (c *conn) invalidateTools() {
	c.cacheMu.Lock()
	c.fetched = time.Time{}
	c.gen++
	c.cacheMu.Unlock()
}

// cachedTools returns the tool list, refreshing it when older than its TTL
// (the entry's ttlMs in mcp.json, else the server's ttlMs, else the runner's
// ToolsTTL).
func (c *conn) cachedTools(ctx context.Context) ([]*toolEntry, error) {
	if list, ok := c.freshTools(); ok {
		return list, nil
	}
	c.toolsMu.Lock()
	defer c.toolsMu.Unlock()
	if list, ok := c.freshTools(); ok {
		return list, nil
	}
	c.mu.Lock()
	s := c.session
	c.mu.Unlock()
	if s == nil {
		if PerUser(c.cfg) && c.principal == "" && c.r.cfg.OAuth != nil {
			if list := c.userTools(ctx); list != nil {
				return list, nil // a person's (peruser.go)
			}
		}
		return nil, c.offline()
	}
	c.cacheMu.Lock()
	gen := c.gen
	c.cacheMu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, c.r.cfg.ConnectTimeout)
	defer cancel()
	var (
		list   []*toolEntry
		byName = map[string]*toolEntry{}
		ttl    time.Duration
		cursor string
	)
	for {
		res, err := s.ListTools(lctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("list tools of %s: %w", c.cfg.Name, err)
		}
		if res.TTLMs > 0 && (ttl == 0 || time.Duration(res.TTLMs)*time.Millisecond < ttl) {
			ttl = time.Duration(res.TTLMs) * time.Millisecond
		}
		for _, t := range res.Tools {
			if len(t.Name) > mcpconfig.MaxNameLen || t.Name == "" {
				c.log.Warn("tool name empty or over the limit; not offered", "tool", t.Name[:min(len(t.Name), 120)], "limit", mcpconfig.MaxNameLen)
				continue
			}
			e := &toolEntry{info: ToolInfo{
				Name:         c.cfg.Name + "." + t.Name,
				Server:       c.cfg.Name,
				Tool:         t.Name,
				Title:        t.Title,
				Description:  t.Description,
				InputSchema:  t.InputSchema,
				OutputSchema: t.OutputSchema,
				PerUser:      PerUser(c.cfg),
			}}
			if a := t.Annotations; a != nil {
				e.info.ReadOnly, e.info.Idempotent = a.ReadOnlyHint, a.IdempotentHint
				if e.info.Title == "" {
					e.info.Title = a.Title
				}
			}
			if _, dup := byName[t.Name]; !dup {
				list = append(list, e)
				byName[t.Name] = e
			}
		}
		if res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	for _, e := range list {
		e.info.ServerTTLMs = ttl.Milliseconds()
	}
	switch {
	case c.cfg.ToolsTTL > 0:
		ttl = c.cfg.ToolsTTL
	case ttl == 0:
		ttl = c.r.cfg.ToolsTTL
	}
	c.cacheMu.Lock()
	c.tools, c.toolSeq, c.ttl, c.listed = byName, list, ttl, time.Now()
	if c.gen == gen { // else invalidated while fetching: use it once, fetch again next time
		c.fetched = time.Now()
	}
	c.cacheMu.Unlock()
	return list, nil
}

func (c *conn) freshTools() ([]*toolEntry, bool) {
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	if !c.freshLocked() {
		return nil, false
	}
	return c.toolSeq, true
}

// freshLocked reports whether the cached list is within its TTL; cacheMu
// is held.
func (c *conn) freshLocked() bool {
	return !c.fetched.IsZero() && time.Since(c.fetched) <= c.ttl
}

// tool returns one cached tool, fetching the list first when the cache is
// not fresh.
func (c *conn) tool(ctx context.Context, name string) (*toolEntry, error) {
	c.cacheMu.Lock()
	fresh, e := c.freshLocked(), c.tools[name]
	c.cacheMu.Unlock()
	if !fresh {
		if _, err := c.cachedTools(ctx); err != nil {
			return nil, err
		}
		c.cacheMu.Lock()
		e = c.tools[name]
		c.cacheMu.Unlock()
	}
	if e == nil {
		return nil, fmt.Errorf("%w: %s.%s", ErrUnknownTool, c.cfg.Name, name)
	}
	return e, nil
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func joinPath(p []string) string { return strings.Join(p, "/") }
