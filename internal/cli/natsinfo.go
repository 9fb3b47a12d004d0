package cli

import (
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"
)

// redactURLs hides the credentials of a NATS URL list (user and password, or
// a token in the user part, which url.URL.Redacted keeps), leaving scheme,
// host and port for the operator to recognise the server.
func redactURLs(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := url.Parse(p)
		switch {
		case err != nil && strings.Contains(p, "@"):
			p = "REDACTED@" + p[strings.LastIndex(p, "@")+1:]
		case err == nil && u.User != nil:
			u.User = url.User("REDACTED")
			p = u.String()
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// reportServer tells the operator, on w (stderr), which NATS server a command
// talked to: its URL without credentials, the server's name, id and version,
// and the subject prefix, so an answer from the wrong server ("0 dead
// letters") is recognisable.
func reportServer(w io.Writer, nc *nats.Conn, prefix string) {
	name, id := nc.ConnectedServerName(), nc.ConnectedServerId()
	if name == id {
		name = "-" // a server without server_name reports its id as its name
	}
	fmt.Fprintf(w, "relay: NATS server %s (name %s, id %s, version %s, subject prefix %q)\n",
		redactURLs(nc.ConnectedUrl()), name, id, nc.ConnectedServerVersion(), prefix)
}
