// Command relay runs the relay station: every service in one process
// (`relay serve`, the default) or one service alone (`relay ingest`, ...), and
// the operator commands (`relay dlq ...`). Settings: docs/configuration.md; the
// commands' wiring lives in internal/cli.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/cli"
)

func main() {
	// First: tool servers run as the same user must not read our secrets
	// from /proc (docs/security.md).
	if err := cli.ProtectProcess(); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], config.OS(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
