package telemetry

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus"
)

// BusHooks are the bus's trace hooks (bus.Config.Trace): a producer span
// per publish whose context travels in the message's traceparent header,
// and a consumer span per handled delivery, a child of it. Each checks
// Enabled first, so a bus built with them costs nothing while tracing is
// off; `relay serve` sets them only when tracing is on.
func BusHooks() *bus.TraceHooks {
	return &bus.TraceHooks{
		Publish: func(ctx context.Context, subject string, h nats.Header) func(error) {
			return Publish(ctx, subject, h)
		},
		Consume: func(ctx context.Context, subject string, m *bus.Message) (context.Context, func(error)) {
			return Consume(ctx, subject, m.Consumer, m.Header, m.Delivered)
		},
	}
}
