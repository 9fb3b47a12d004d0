package bus_test

import (
	"context"
	"fmt"
	"os"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/envelope"
)

// Start a bus on an embedded JetStream server, publish an inbound envelope
// (twice: the second is recognised by its message id and not stored), and
// consume it as a worker type does.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "bus-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	// No URL: an embedded server storing under DataDir, on a free port.
	b, err := bus.Connect(ctx, bus.Config{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "octo opened issue #7")
	e.Meta.Thread = envelope.GitHubThread("octo", "hello", 7)
	for range 2 {
		res, err := b.Publish(ctx, "in.github.issues", e, bus.WithMsgID("github:123:delivery-1"))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("stored:", res.Stream, res.Sequence, "duplicate:", res.Duplicate)
	}

	got := make(chan *bus.Message, 1)
	consumed := make(chan error, 1)
	go func() {
		consumed <- b.Consume(ctx, bus.ConsumerConfig{Name: "example", Subject: "in.>"},
			bus.HandlerFunc(func(_ context.Context, m *bus.Message) error {
				got <- m
				return nil // ack
			}))
	}()
	m := <-got
	fmt.Println("consumed:", m.Subject, m.Envelope.Meta.Thread, m.Envelope.Content, "delivery", m.Delivered)
	cancel() // Consume drains and returns
	fmt.Println("consume returned:", <-consumed)
	// Output:
	// stored: RELAY_IN 1 duplicate: false
	// stored: RELAY_IN 1 duplicate: true
	// consumed: in.github.issues github:octo/hello#7 octo opened issue #7 delivery 1
	// consume returned: <nil>
}
