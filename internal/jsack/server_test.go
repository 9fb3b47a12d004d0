package jsack_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/jsack"
)

// TestPublishAgainstServer: a publish is stored and acked, a repeated
// message id is a duplicate, a failed expectation is the API error
// jetstream gives, and a subject no stream takes is ErrNoStreamResponse.
func TestPublishAgainstServer(t *testing.T) {
	b := bustest.Embedded(t)
	js, nc, ctx := b.JetStream(), b.Conn(), context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JSACK", Subjects: []string{"jsack.>"}}); err != nil {
		t.Fatal(err)
	}
	msg := func(id string) *nats.Msg {
		m := nats.NewMsg("jsack.a")
		m.Data = []byte("x")
		m.Header.Set(jetstream.MsgIDHeader, id)
		return m
	}
	for i, want := range []jetstream.PubAck{{Stream: "JSACK", Sequence: 1}, {Stream: "JSACK", Sequence: 1, Duplicate: true}} {
		if got, err := jsack.Publish(ctx, nc, msg("one")); err != nil || got != want {
			t.Fatalf("publish %d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	m := msg("two")
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "5")
	_, err := jsack.Publish(ctx, nc, m)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("a wrong expected sequence gave %v, want API error %d", err, jetstream.JSErrCodeStreamWrongLastSequence)
	}
	if _, err := jsack.Publish(ctx, nc, nats.NewMsg("nostream.a")); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("a subject without a stream gave %v, want ErrNoStreamResponse after the retries", err)
	}
}
