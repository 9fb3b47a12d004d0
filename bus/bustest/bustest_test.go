package bustest_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
)

// TestDrainedSeesAMessageJustPublished: a message whose publish was
// acknowledged keeps its consumer from being drained until the consumer acks
// it, however late the server tells the consumer of it (the stream signals its
// consumers from a goroutine of its own), and a filter's other subjects do not
// count.
func TestDrainedSeesAMessageJustPublished(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	ctx := t.Context()
	stream := b.StreamName("in.github.x")
	c, err := b.JetStream().CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "drained-test", FilterSubject: b.Subject("in.github.>"), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(subject string) {
		t.Helper()
		if _, err := b.Publish(ctx, subject, envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "x")); err != nil {
			t.Fatal(err)
		}
	}
	drained := func() bool {
		t.Helper()
		ok, err := bustest.Drained(ctx, b, stream, "drained-test")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for i := range 300 {
		publish("in.github.issues")
		if drained() {
			t.Fatalf("round %d: drained right after a publish, before the consumer saw the message", i)
		}
		msgs, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range msgs.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if !drained() {
			t.Fatalf("round %d: not drained after the ack", i)
		}
		publish("in.slack.message") // outside the filter
		if !drained() {
			t.Fatalf("round %d: a message outside the filter kept the consumer from being drained", i)
		}
	}
}
