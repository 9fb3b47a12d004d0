package cli

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

func init() {
	registerCommand(&command{
		name:    "healthcheck",
		usage:   "[url]",
		summary: "exit 0 when the relay's /readyz answers 200 (for container health checks)",
		run:     runHealthcheck,
	})
}

// runHealthcheck asks the local relay's /readyz (on RELAY_METRICS_ADDR when
// set, else RELAY_HTTP_ADDR), so images without curl can have health checks.
func runHealthcheck(ctx context.Context, a *app, args []string) error {
	url := ""
	if len(args) > 0 {
		url = args[0]
	} else {
		host, port, _ := net.SplitHostPort(cmp.Or(a.base.MetricsAddr, a.base.HTTPAddr))
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		url = "http://" + net.JoinHostPort(host, port) + "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("healthcheck %s: %v", url, err)}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &exitError{code: 1, msg: fmt.Sprintf("healthcheck %s: %s", url, resp.Status)}
	}
	return nil
}
