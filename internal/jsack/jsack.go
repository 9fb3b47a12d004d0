// Package jsack publishes a message to JetStream and waits for its ack as
// jetstream.JetStream.PublishMsg does (the same request, the same retries
// while no stream answers, the same errors), but reads the usual ack,
// {"stream":"S","seq":N} or {"stream":"S","seq":N,"duplicate": true} (or
// the form of servers before 2.10, `, "seq":`), without encoding/json.
// Decoding the ack with encoding/json was more than half of the client's
// cost of a publish; every other reply goes through it as before.
package jsack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultTimeout bounds a publish whose context has no deadline, as the
// jetstream package's default does.
const DefaultTimeout = 5 * time.Second

// Publish sends msg and returns JetStream's ack. A "no responders" reply
// (no stream leader yet) is retried jetstream.DefaultPubRetryAttempts times
// jetstream.DefaultPubRetryWait apart, then reported as
// jetstream.ErrNoStreamResponse; an API error is a *jetstream.APIError
// wrapped as jetstream wraps it, so errors.Is and errors.As see the same.
func Publish(ctx context.Context, nc *nats.Conn, msg *nats.Msg) (jetstream.PubAck, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	resp, err := nc.RequestMsgWithContext(ctx, msg)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = nc.RequestMsgWithContext(ctx, msg)
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return jetstream.PubAck{}, jetstream.ErrNoStreamResponse
		}
		return jetstream.PubAck{}, err
	}
	return Parse(resp.Data)
}

// Parse reads a publish reply: the ack, or the API error it carries, or
// jetstream.ErrInvalidJSAck for anything else.
func Parse(data []byte) (jetstream.PubAck, error) {
	if ack, ok := parseFast(data); ok {
		return ack, nil
	}
	var reply struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		jetstream.PubAck
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		return jetstream.PubAck{}, jetstream.ErrInvalidJSAck
	}
	if reply.Error != nil {
		return jetstream.PubAck{}, fmt.Errorf("nats: %w", reply.Error)
	}
	if reply.Stream == "" {
		return jetstream.PubAck{}, jetstream.ErrInvalidJSAck
	}
	return reply.PubAck, nil
}

// parseFast reads exactly the ack a server writes for a stored (or
// duplicate) message in a stream without a domain:
// {"stream":"S","seq":N} and {"stream":"S","seq":N,"duplicate": true}
// (servers before 2.10 write `, "seq":`; the duplicate's space is read
// either way), S without escapes, N without sign, exponent or leading zero.
// It reports false for anything else, which Parse leaves to encoding/json.
func parseFast(b []byte) (jetstream.PubAck, bool) {
	var ack jetstream.PubAck
	rest, ok := cut(b, `{"stream":"`)
	if !ok {
		return ack, false
	}
	end := 0
	for end < len(rest) && rest[end] != '"' {
		if c := rest[end]; c == '\\' || c < 0x20 || c >= 0x80 {
			return ack, false
		}
		end++
	}
	if end == 0 || end == len(rest) {
		return ack, false
	}
	ack.Stream = string(rest[:end])
	rest = rest[end:]
	if after, ok := cut(rest, `","seq":`); ok {
		rest = after
	} else if rest, ok = cut(rest, `", "seq":`); !ok { // nats-server before 2.10
		return ack, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		if n == 19 || n == 1 && rest[0] == '0' { // overflow risk, or a leading zero
			return ack, false
		}
		ack.Sequence = ack.Sequence*10 + uint64(rest[n]-'0')
		n++
	}
	if n == 0 {
		return ack, false
	}
	switch string(rest[n:]) {
	case `}`:
	case `,"duplicate": true}`, `,"duplicate":true}`:
		ack.Duplicate = true
	default:
		return ack, false
	}
	return ack, true
}

// cut returns b after prefix, and whether b starts with it.
func cut(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return nil, false
	}
	return b[len(prefix):], true
}
