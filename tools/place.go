package tools

import (
	"context"
	"fmt"

	"github.com/relaystation/relay/tools/mcpconfig"
)

// ToolsAt lists the tools role may call at a place, from every ready
// server, in server then tool order: a binding of the place (or of its
// parent, inherited) keeps only its servers; a zero Location or an unbound
// place keeps every server. Verb capabilities ("github.read") are decided
// by each tool's readOnlyHint. Servers that cannot list are left out.
func (r *Runner) ToolsAt(ctx context.Context, role string, at mcpconfig.Location) []ToolInfo {
	var out []ToolInfo
	for _, c := range r.list() {
		name := c.cfg.Name
		if c.isDisabled() || !r.cfg.Policy.OfferedAt(at, name) {
			continue
		}
		list, err := c.cachedTools(ctx)
		if err != nil {
			continue
		}
		for _, e := range list {
			if r.cfg.Policy.AllowedTool(role, name, e.info.Tool, e.info.ReadOnly) {
				out = append(out, e.info)
			}
		}
	}
	return out
}

// verbOf names the verb capability a tool falls under.
func verbOf(readOnly bool) string {
	if readOnly {
		return "read-only: " + mcpconfig.VerbRead
	}
	return "not read-only: " + mcpconfig.VerbWrite
}

// ValidateArgs checks arguments against a listed tool's inputSchema, as a
// call would, so a caller can say what is wrong before publishing the call.
func ValidateArgs(ti ToolInfo, args map[string]any) error {
	s, err := compileToolSchema(ti.Name+"/input.json", ti.InputSchema)
	if err != nil {
		return nil // the runner logs a schema that does not compile and calls anyway
	}
	if args == nil {
		args = map[string]any{}
	}
	if err := validate(s, args); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArguments, err)
	}
	return nil
}
