package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/relaystation/relay/internal/clip"
	"github.com/relaystation/relay/internal/rpc"
)

func init() {
	registerCommand(&command{
		name:    "services",
		usage:   "[-json] [-all] [-wait D]",
		summary: "running request/reply services (nats.go/micro $SRV.INFO and STATS): instances, endpoints, requests, errors",
		run:     runServices,
	})
}

func runServices(ctx context.Context, a *app, args []string) error {
	fs := a.flags("services")
	asJSON := fs.Bool("json", false, "print one JSON array of instances, {info, stats} each ([] when none)")
	all := fs.Bool("all", false, "every micro service on the NATS server, not only this relay's (bus prefix)")
	wait := fs.Duration("wait", time.Second, "how long to gather answers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := a.checkEnv(); err != nil {
		return err
	}
	b, err := a.clientBus(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	prefix := b.Prefix()
	if *all {
		prefix = ""
	}
	found, err := rpc.Discover(ctx, b.Conn(), prefix, *wait)
	if err != nil {
		return err
	}
	if *asJSON {
		if found == nil {
			found = []rpc.Instance{}
		}
		return json.NewEncoder(a.stdout).Encode(found)
	}
	scope := "prefix " + b.Prefix()
	if *all {
		scope = "all prefixes"
	}
	return writeTable(a.stdout, "SERVICE\tID\tVERSION\tENDPOINT\tSUBJECT\tQUEUE\tREQUESTS\tERRORS\tAVERAGE\tLAST ERROR", func(line func(string, ...any)) {
		for _, in := range found {
			for _, ep := range in.Info.Endpoints {
				requests, errs, avg, last := endpointStats(in, ep.Name)
				line("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", in.Info.Name, in.Info.ID, in.Info.Version,
					ep.Name, ep.Subject, ep.QueueGroup, requests, errs, avg, last)
			}
		}
	}, fmt.Sprintf("%d service instance(s) (%s)", len(found), scope))
}

// endpointStats is the named endpoint's request and error counts, average
// time and last error as table cells ("-" without stats).
func endpointStats(in rpc.Instance, name string) (requests, errs, avg, last string) {
	requests, errs, avg = "-", "-", "-"
	if in.Stats == nil {
		return requests, errs, avg, last
	}
	for _, st := range in.Stats.Endpoints {
		if st.Name == name {
			requests, errs = fmt.Sprint(st.NumRequests), fmt.Sprint(st.NumErrors)
			avg, last = st.AverageProcessingTime.Round(time.Microsecond).String(), clip.Line(st.LastError, 80)
		}
	}
	return requests, errs, avg, last
}
