package bus_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
)

// benchEnvelope is a typical inbound envelope (about 1 KB).
func benchEnvelope() *envelope.Envelope {
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser,
		"octocat opened issue #1347 in octo-org/hello-world: \"Found a bug\"\n\nI'm having a problem with this. "+
			"Steps to reproduce: open the login page, type a password with an emoji, press enter; the page crashes "+
			"with a 500 and the log shows a UTF-8 decoding error in the session middleware. Expected: a login.")
	e.Meta.Thread = envelope.GitHubThread("octo-org", "hello-world", 1347)
	e.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		URL: "https://github.com/octo-org/hello-world/issues/1347", Actor: "octocat"}
	e.Meta.Budget = &envelope.Budget{Tokens: 120}
	return e
}

// BenchmarkPublish compares bus.Publish (validate, marshal, headers, ack)
// with raw jetstream publishing of the same bytes on the same connection to
// the same in-process server, synchronously and with bounded in-flight
// publishes (64). Run: go test -run=^$ -bench=Publish -benchtime=20000x ./bus/
func BenchmarkPublish(b *testing.B) {
	bb := bustest.Embedded(b)
	e := benchEnvelope()
	data, err := e.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	subj := "in.github.issues"
	abs := bb.Subject(subj)
	js := bb.JetStream()
	ctx := context.Background()
	var n atomic.Uint64
	id := func() string { return "bench-" + strconv.FormatUint(n.Add(1), 10) }
	const inflight = 64

	b.Run("sync/bus", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := bb.Publish(ctx, subj, e, bus.WithMsgID(id())); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sync/raw", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			msg := &nats.Msg{Subject: abs, Data: data, Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, id())
			if _, err := js.PublishMsg(ctx, msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("inflight64/bus", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		var wg sync.WaitGroup
		sem := make(chan struct{}, inflight)
		for b.Loop() {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if _, err := bb.Publish(ctx, subj, e, bus.WithMsgID(id())); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	})
	b.Run("inflight64/raw-async", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		ajs, err := jetstream.New(bb.Conn(), jetstream.WithPublishAsyncMaxPending(inflight))
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			msg := &nats.Msg{Subject: abs, Data: data, Header: nats.Header{}}
			msg.Header.Set(jetstream.MsgIDHeader, id())
			if _, err := ajs.PublishMsgAsync(msg); err != nil {
				b.Fatal(err)
			}
		}
		<-ajs.PublishAsyncComplete()
	})
}
