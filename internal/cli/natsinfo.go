package cli

import (
	"fmt"
	"io"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/secret"
)

// reportServer tells the operator, on w (stderr), which NATS server a command
// talked to: its URL without credentials (tokens included), the server's
// name, id and version, and the subject prefix, so an answer from the wrong
// server ("0 dead letters") is recognisable.
func reportServer(w io.Writer, nc *nats.Conn, prefix string) {
	name, id := nc.ConnectedServerName(), nc.ConnectedServerId()
	if name == id {
		name = "-" // a server without server_name reports its id as its name
	}
	fmt.Fprintf(w, "relay: NATS server %s (name %s, id %s, version %s, subject prefix %q)\n",
		secret.RedactURLs(nc.ConnectedUrl()), name, id, nc.ConnectedServerVersion(), prefix)
}
