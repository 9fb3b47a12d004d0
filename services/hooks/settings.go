package hooks

import (
	"errors"
	"os"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// DefaultPath is the hooks file read when RELAY_HOOKS is unset.
const DefaultPath = "./hooks.yaml"

// Settings are the hooks worker's settings, shared by the service and the
// `relay hooks` operator commands.
type Settings struct {
	// Path is the hooks file (RELAY_HOOKS, default ./hooks.yaml); Explicit
	// says RELAY_HOOKS named it.
	Path     string
	Explicit bool
	// Hooks are the loaded hooks (empty when the default file is missing).
	Hooks *File
	// Servers are the server names of mcp.json (RELAY_MCP_CONFIG), nil when
	// it could not be read.
	Servers []string
	// MCPConfig and DataDir are RELAY_MCP_CONFIG (default ./mcp.json) and
	// RELAY_DATA_DIR (default ./data), for reading the server names again
	// (ServerNames) when the hooks file is reloaded.
	MCPConfig, DataDir string
	// Concurrency is RELAY_HOOKS_CONCURRENCY (default 5, 1 to 100).
	Concurrency int
}

// ReadSettings reads RELAY_HOOKS and RELAY_HOOKS_CONCURRENCY and loads the
// hooks file, checking every action's server against mcp.json. A missing
// default file means no hooks; a missing explicit one, or an invalid file, is
// recorded in env.
func ReadSettings(env *config.Env) *Settings {
	s := &Settings{Path: env.String("RELAY_HOOKS", "")}
	s.Explicit = s.Path != ""
	if !s.Explicit {
		s.Path = DefaultPath
	}
	s.Concurrency = env.Int("RELAY_HOOKS_CONCURRENCY", 5, 1, 100)
	s.MCPConfig, s.DataDir = env.String("RELAY_MCP_CONFIG", "./mcp.json"), env.String("RELAY_DATA_DIR", "./data")
	s.Hooks = &File{}
	f, err := Load(s.Path)
	switch {
	case err == nil:
		s.Hooks = f
	case errors.Is(err, ErrNotFound) && !s.Explicit:
	default:
		env.Failf("RELAY_HOOKS", "%v", err)
		return s
	}
	s.Servers = ServerNames(s.MCPConfig, s.DataDir)
	if len(s.Hooks.Hooks) > 0 && s.Servers != nil {
		if probs := Errors(s.Hooks.Check(Catalog{Servers: s.Servers})); len(probs) > 0 {
			env.Failf("RELAY_HOOKS", "%v", &ValidationError{Path: s.Path, Problems: probs})
		}
	}
	return s
}

// ServerNames are the server names of the mcp.json at path (none when it is
// missing), or nil when it cannot be read (the tool runner reports why).
func ServerNames(path, dataDir string) []string {
	f, err := mcpconfig.LoadFile(path, mcpconfig.Options{Lookup: os.LookupEnv, DataDir: dataDir})
	if err != nil && !errors.Is(err, mcpconfig.ErrNotFound) {
		return nil
	}
	out := []string{}
	if f != nil {
		for _, sv := range f.Servers {
			out = append(out, sv.Name)
		}
		for _, iv := range f.Invalid {
			out = append(out, iv.ID) // configured; the tool runner says why it is invalid
		}
	}
	return out
}
