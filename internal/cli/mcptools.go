package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/relaystation/relay/services/toolrunner"
	"github.com/relaystation/relay/tools"
)

// mcpTools is `relay mcp tools <server> [-json]`: the server's tools with
// their input and output schemas exactly as the server sent them (no $ref
// resolved, 2020-12 keywords kept), from a fresh session.
func mcpTools(ctx context.Context, a *app, ts *toolrunner.Settings, args []string) error {
	s, asJSON, release, err := probeArgs(ctx, a, ts, "tools", args)
	if err != nil {
		return err
	}
	list, err := tools.ListServerTools(ctx, ts.Runner, s)
	release()
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("%s: %v", s.Name, err)}
	}
	if asJSON {
		return json.NewEncoder(a.stdout).Encode(list)
	}
	fmt.Fprintf(a.stdout, "server %s, protocol %s (%s), %d tool(s)\n", s.Name, list.ProtocolVersion, versionChoice(s), len(list.Tools))
	for _, t := range list.Tools {
		fmt.Fprintf(a.stdout, "\n%s.%s", s.Name, t.Name)
		if t.Title != "" {
			fmt.Fprintf(a.stdout, " (%s)", t.Title)
		}
		fmt.Fprintln(a.stdout)
		if t.Description != "" {
			fmt.Fprintf(a.stdout, "  %s\n", t.Description)
		}
		for _, sch := range []struct {
			label string
			v     any
		}{{"input schema", t.InputSchema}, {"output schema", t.OutputSchema}} {
			if sch.v == nil {
				continue
			}
			b, err := json.MarshalIndent(sch.v, "    ", "  ")
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "  %s:\n    %s\n", sch.label, b)
		}
	}
	return nil
}
