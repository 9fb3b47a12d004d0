package bus_test

import (
	"context"
	"errors"
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
// with raw jetstream publishing of the same body, on the same connection to
// the same in-process server, in one run: each iteration does one of each,
// rotating which goes first, so drift and noise hit all alike. Two ceilings:
// "raw" sends the body with only Nats-Msg-Id (the bare client call), "rawh"
// sends the very bytes the bus sends, its six Relay-* headers included (what
// a hand-written producer of the same messages pays). It reports the p50 of
// each and the bus's ratio to both.
//
// sync: one publish at a time, waiting for each ack. async64: 64 publishes in
// flight (bus.PublishAsync against jetstream.PublishMsgAsync, both bounded at
// 64 pending; the raw side waits out a stall as the bus does), per-publish
// time = wall time / publishes.
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
	rawMsg := func(relayHeaders bool) *nats.Msg {
		msg := &nats.Msg{Subject: abs, Data: data, Header: nats.Header{}}
		if relayHeaders {
			envelope.EncodeHeader(e, msg.Header)
		}
		msg.Header.Set(jetstream.MsgIDHeader, id())
		return msg
	}

	b.Run("sync", func(b *testing.B) {
		var d [3][]time.Duration
		timed := func(k int, publish func() error) func() {
			return func() {
				t0 := time.Now()
				if err := publish(); err != nil {
					b.Fatal(err)
				}
				d[k] = append(d[k], time.Since(t0))
			}
		}
		runs := [3]func(){
			timed(0, func() error { _, err := bb.Publish(ctx, subj, e, bus.WithMsgID(id())); return err }),
			timed(1, func() error { _, err := js.PublishMsg(ctx, rawMsg(false)); return err }),
			timed(2, func() error { _, err := js.PublishMsg(ctx, rawMsg(true)); return err }),
		}
		i := 0
		for b.Loop() {
			rotate(i, runs)
			i++
		}
		report(b, d)
	})
	b.Run("async64", func(b *testing.B) { benchPublishAsync(b, bb, e, subj, id, rawMsg) })
}

// benchPublishAsync is BenchmarkPublish's async64 side: bus.PublishAsync
// against raw PublishMsgAsync (with and without the bus's headers), 64 in
// flight, in chunks of 1,000 publishes.
func benchPublishAsync(b *testing.B, bb *bus.Bus, e *envelope.Envelope, subj string, id func() string, rawMsg func(bool) *nats.Msg) {
	ctx := context.Background()
	ajs, err := jetstream.New(bb.Conn(), jetstream.WithPublishAsyncMaxPending(64))
	if err != nil {
		b.Fatal(err)
	}
	const chunk = 1000
	var d [3][]time.Duration
	timed := func(k int, publish func() error, done func() <-chan struct{}) func() {
		return func() {
			t0 := time.Now()
			for range chunk {
				if err := publish(); err != nil {
					b.Fatal(err)
				}
			}
			<-done()
			d[k] = append(d[k], time.Since(t0)/chunk)
		}
	}
	raw := func(relayHeaders bool) func() error {
		return func() error {
			msg := rawMsg(relayHeaders)
			for {
				_, err := ajs.PublishMsgAsync(msg)
				if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
					return err
				}
			}
		}
	}
	runs := [3]func(){
		timed(0, func() error { _, err := bb.PublishAsync(ctx, subj, e, bus.WithMsgID(id())); return err }, bb.PublishAsyncComplete),
		timed(1, raw(false), ajs.PublishAsyncComplete),
		timed(2, raw(true), ajs.PublishAsyncComplete),
	}
	i := 0
	for b.Loop() {
		if i%chunk == 0 {
			rotate(i/chunk, runs)
		}
		i++
	}
	report(b, d)
}

// rotate runs the three in turn, starting with a different one each turn,
// so none always runs first.
func rotate(turn int, runs [3]func()) {
	for k := range runs {
		runs[(turn+k)%len(runs)]()
	}
}

// report writes the p50 of the bus (d[0]), the raw publish (d[1]) and the
// raw publish with the bus's headers (d[2]), and the bus's ratio to each.
func report(b *testing.B, d [3][]time.Duration) {
	var p [3]time.Duration
	for k := range d {
		if len(d[k]) == 0 {
			return
		}
		slices.Sort(d[k])
		p[k] = d[k][len(d[k])/2]
	}
	b.ReportMetric(float64(p[0].Nanoseconds())/1000, "bus-p50-µs")
	b.ReportMetric(float64(p[1].Nanoseconds())/1000, "raw-p50-µs")
	b.ReportMetric(float64(p[2].Nanoseconds())/1000, "rawh-p50-µs")
	b.ReportMetric(float64(p[0])/float64(p[1]), "bus/raw")
	b.ReportMetric(float64(p[0])/float64(p[2]), "bus/rawh")
	b.ReportMetric(0, "ns/op")
}
