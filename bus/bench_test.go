package bus_test

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
)

// benchEnvelope is a typical inbound envelope (about 700 bytes).
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
// with raw jetstream publishing of the same bytes, on the same connection to
// the same in-process server, in one run: each iteration does one of each,
// alternating which goes first, so drift and noise hit both alike. It reports
// the p50 of each and their ratio.
//
// sync: one publish at a time, waiting for each ack. async64: 64 publishes in
// flight (bus.PublishAsync against jetstream.PublishMsgAsync, both bounded at
// 64 pending), per-publish time = wall time / publishes.
//
//	go test -run='^$' -bench=Publish -benchtime=20000x ./bus/
func BenchmarkPublish(b *testing.B) {
	bb := bustest.Embedded(b, func(c *bus.Config) { c.MaxAsyncPending = 64 })
	e := benchEnvelope()
	data, err := e.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	const subj = "in.github.issues"
	abs := bb.Subject(subj)
	js := bb.JetStream()
	ctx := context.Background()
	var n atomic.Uint64
	id := func() string { return "bench-" + strconv.FormatUint(n.Add(1), 10) }
	rawMsg := func() *nats.Msg {
		msg := &nats.Msg{Subject: abs, Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, id())
		return msg
	}

	b.Run("sync", func(b *testing.B) {
		var wrap, raw []time.Duration
		busOnce := func() {
			t0 := time.Now()
			if _, err := bb.Publish(ctx, subj, e, bus.WithMsgID(id())); err != nil {
				b.Fatal(err)
			}
			wrap = append(wrap, time.Since(t0))
		}
		rawOnce := func() {
			t0 := time.Now()
			if _, err := js.PublishMsg(ctx, rawMsg()); err != nil {
				b.Fatal(err)
			}
			raw = append(raw, time.Since(t0))
		}
		i := 0
		for b.Loop() {
			alternate(i, busOnce, rawOnce)
			i++
		}
		report(b, wrap, raw)
	})
	b.Run("async64", func(b *testing.B) {
		ajs, err := jetstream.New(bb.Conn(), jetstream.WithPublishAsyncMaxPending(64))
		if err != nil {
			b.Fatal(err)
		}
		const chunk = 1000
		var wrap, raw []time.Duration
		busChunk := func() {
			t0 := time.Now()
			for range chunk {
				if _, err := bb.PublishAsync(ctx, subj, e, bus.WithMsgID(id())); err != nil {
					b.Fatal(err)
				}
			}
			<-bb.PublishAsyncComplete()
			wrap = append(wrap, time.Since(t0)/chunk)
		}
		rawChunk := func() {
			t0 := time.Now()
			for range chunk {
				if _, err := ajs.PublishMsgAsync(rawMsg()); err != nil {
					b.Fatal(err)
				}
			}
			<-ajs.PublishAsyncComplete()
			raw = append(raw, time.Since(t0)/chunk)
		}
		i := 0
		for b.Loop() {
			if i%chunk == 0 {
				alternate(i/chunk, busChunk, rawChunk)
			}
			i++
		}
		report(b, wrap, raw)
	})
}

// alternate runs x then y on even turns and y then x on odd ones.
func alternate(turn int, x, y func()) {
	if turn%2 == 0 {
		x()
		y()
		return
	}
	y()
	x()
}

func report(b *testing.B, wrap, raw []time.Duration) {
	if len(wrap) == 0 || len(raw) == 0 {
		return
	}
	slices.Sort(wrap)
	slices.Sort(raw)
	w, r := wrap[len(wrap)/2], raw[len(raw)/2]
	b.ReportMetric(float64(w.Nanoseconds())/1000, "bus-p50-µs")
	b.ReportMetric(float64(r.Nanoseconds())/1000, "raw-p50-µs")
	b.ReportMetric(float64(w)/float64(r), "bus/raw")
	b.ReportMetric(0, "ns/op")
}
