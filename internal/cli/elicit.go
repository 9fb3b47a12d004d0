package cli

import (
	"os"

	"golang.org/x/term"

	"github.com/relaystation/relay/tools"
)

// terminalElicitor answers the questions servers ask during `relay mcp
// call`: the person at the terminal when stdin is one; otherwise nil, so the
// schema's defaults apply when every required field has one, else a decline.
func terminalElicitor(a *app) tools.Elicitor {
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return nil
	}
	return tools.NewPrompter(os.Stdin, a.stderr)
}
