// Package mcpconformance drives the relay's MCP client side through the
// official MCP conformance suite (npm @modelcontextprotocol/conformance,
// client scenarios). The suite starts a test server per scenario and launches
// a client program with the server's URL; Client is that program's body: it
// connects through package tools exactly as the tool runner does (one session,
// health loop, elicitation with the schema's defaults since no human is
// present), lists the tools and calls each one (or the calls the scenario
// asks for: plan.go).
//
// The program is cmd/relay-conformance-client (for runs by hand); the Go test
// runs the suite with its own binary as the client, running Client the same
// way. Installing the suite and the Node.js 22 it needs: scripts/setup.sh
// (testdata/conformance).
package mcpconformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// Client connects to url as server "conformance", calls every tool it
// offers with arguments made from the tool's input schema, and reports the
// first failure. scenario is MCP_CONFORMANCE_SCENARIO (logged only). Results
// are printed to out, the runner's log to log.
func Client(ctx context.Context, scenario, url string, out io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if strings.HasPrefix(scenario, "auth/") { // auth.go
		return AuthClient(ctx, scenario, url, os.Getenv("MCP_CONFORMANCE_CONTEXT"), out, os.Stderr)
	}
	srv := mcpconfig.Server{Name: "conformance", Type: mcpconfig.HTTP, URL: url}
	r, err := tools.New(tools.Config{
		Servers:        []mcpconfig.Server{srv},
		Logger:         log.With("scenario", scenario),
		ConnectTimeout: 10 * time.Second,
		ClientName:     "relay-conformance-client",
		ClientVersion:  "1.0.0",
	})
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Start(ctx); err != nil {
		return err
	}
	// Up to three handshakes: a loaded CI machine may need a retry of the
	// first (ConnectTimeout each, 1 s apart); the suite's own limit is longer.
	wctx, cancel := context.WithTimeout(ctx, 35*time.Second)
	pending := r.WaitReady(wctx)
	cancel()
	if len(pending) > 0 {
		return fmt.Errorf("server not ready: %+v", r.Servers()[0])
	}
	list, err := r.AllTools(ctx, srv.Name)
	if err != nil {
		return fmt.Errorf("list tools: %w", err)
	}
	fmt.Fprintf(out, "%d tools\n", len(list))
	var errs []error
	for _, c := range plan(scenario, list) {
		name := srv.Name + "." + c.Tool
		res := r.Call(ctx, tools.Request{Tool: name, Args: c.Args, Operator: true})
		if res.Err != nil {
			errs = append(errs, fmt.Errorf("call %s: %w", name, res.Err))
			continue
		}
		fmt.Fprintf(out, "%s: %s\n", name, res.Text)
	}
	return errors.Join(errs...)
}

// Args makes arguments that satisfy a tool's input schema: every required
// property gets its default, its first enum value, or a plain value of its
// type (numbers count up from 2, so a sum is visible).
func Args(schema any) map[string]any {
	m, _ := schema.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	req, _ := m["required"].([]any)
	names := make([]string, 0, len(req))
	for _, r := range req {
		if s, ok := r.(string); ok {
			names = append(names, s)
		}
	}
	sort.Strings(names)
	out := map[string]any{}
	n := 2
	for _, name := range names {
		p, _ := props[name].(map[string]any)
		if d, ok := p["default"]; ok {
			out[name] = d
			continue
		}
		if e, ok := p["enum"].([]any); ok && len(e) > 0 {
			out[name] = e[0]
			continue
		}
		typ, _ := p["type"].(string)
		switch typ {
		case "number", "integer":
			out[name] = n
			n++
		case "boolean":
			out[name] = true
		case "array":
			out[name] = []any{}
		case "object":
			out[name] = map[string]any{}
		default:
			out[name] = strings.ToUpper(name[:1]) + name[1:]
		}
	}
	return out
}
