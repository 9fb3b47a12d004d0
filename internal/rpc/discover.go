package rpc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Instance is one running service instance: its $SRV.INFO answer and, when
// it answered that too, its $SRV.STATS.
type Instance struct {
	Info  micro.Info   `json:"info"`
	Stats *micro.Stats `json:"stats,omitempty"`
}

// Discover asks every nats.go/micro service reachable on nc for its info
// ($SRV.INFO, one request that every instance answers) and gathers the
// answers for wait (default 1s), then asks each instance for its stats.
// With prefix set, only services whose metadata "prefix" is prefix are kept
// (other relays and other micro services on the server are left out).
// Instances come sorted by name and id.
func Discover(ctx context.Context, nc *nats.Conn, prefix string, wait time.Duration) ([]Instance, error) {
	if wait <= 0 {
		wait = time.Second
	}
	subject, err := micro.ControlSubject(micro.InfoVerb, "", "")
	if err != nil {
		return nil, err
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("discover services: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("discover services: %w", err)
	}
	gather, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var out []Instance
	for {
		msg, err := sub.NextMsgWithContext(gather)
		if errors.Is(err, nats.ErrNoResponders) {
			break // no service at all
		}
		if err != nil {
			if gather.Err() != nil && ctx.Err() == nil {
				break // the gathering window is over
			}
			return nil, fmt.Errorf("discover services: %w", err)
		}
		var info micro.Info
		if json.Unmarshal(msg.Data, &info) != nil || info.Type != micro.InfoResponseType {
			continue
		}
		if prefix != "" && info.Metadata[MetadataPrefix] != prefix {
			continue
		}
		out = append(out, Instance{Info: info})
	}
	slices.SortFunc(out, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.Info.Name, b.Info.Name), cmp.Compare(a.Info.ID, b.Info.ID))
	})
	for i := range out {
		out[i].Stats = stats(ctx, nc, out[i].Info)
	}
	return out, nil
}

// stats asks one instance for its stats; nil when it does not answer (it
// stopped since it answered INFO).
func stats(ctx context.Context, nc *nats.Conn, info micro.Info) *micro.Stats {
	subject, err := micro.ControlSubject(micro.StatsVerb, info.Name, info.ID)
	if err != nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, subject, nil)
	if err != nil {
		return nil
	}
	var st micro.Stats
	if json.Unmarshal(msg.Data, &st) != nil || st.Type != micro.StatsResponseType {
		return nil
	}
	return &st
}
