// Command relay-conformance-client is the client program the official MCP
// conformance suite launches: `relay-conformance-client <server url>`, with
// MCP_CONFORMANCE_SCENARIO set. It exits 0 when every tool call succeeded.
//
//	conformance client --command relay-conformance-client --scenario tools_call
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/relaystation/relay/internal/mcpconformance"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: relay-conformance-client <server url>")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := mcpconformance.Client(ctx, os.Getenv("MCP_CONFORMANCE_SCENARIO"), os.Args[1], os.Stdout, log); err != nil {
		fmt.Fprintln(os.Stderr, "relay-conformance-client:", err)
		os.Exit(1)
	}
}
