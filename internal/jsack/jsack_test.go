package jsack

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// reference is jetstream's own reading of a publish reply
// (jetstream.publishMsg), which Parse must agree with.
func reference(data []byte) (jetstream.PubAck, error) {
	var reply struct {
		Type  string              `json:"type"`
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		return jetstream.PubAck{}, jetstream.ErrInvalidJSAck
	}
	if reply.Error != nil {
		return jetstream.PubAck{}, fmt.Errorf("nats: %w", reply.Error)
	}
	if reply.PubAck == nil || reply.Stream == "" {
		return jetstream.PubAck{}, jetstream.ErrInvalidJSAck
	}
	return *reply.PubAck, nil
}

// written are the acks servers write for a stored and a duplicate message:
// nats-server 2.10 and later, then 2.9 (the machines' Debian package).
var written = []string{
	`{"stream":"RELAY_IN","seq":1}`,
	`{"stream":"KV_relay_sessions","seq":42,"duplicate": true}`,
	`{"stream":"RELAY_IN", "seq":1}`,
	`{"stream":"KV_relay_sessions", "seq":42,"duplicate": true}`,
}

var replies = append(written,
	`{"stream":"RELAY_IN","seq":1}`,
	`{"stream":"RELAY_IN","seq":18446744073709551615}`,
	`{"stream":"KV_relay_sessions","seq":42,"duplicate":true}`,
	`{"stream":"S","seq":0}`,
	`{"stream":"S","domain":"hub","seq":7}`,
	`{"stream":"S","seq":7,"val":"3"}`,
	`{"stream":"S","seq":07}`,
	`{"stream":"S\u00e9","seq":7}`,
	`{"stream":"S","seq":-1}`,
	`{"stream":"","seq":7}`,
	`{"seq":7}`,
	`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"},"stream":"S","seq":0}`,
	`{"type":"io.nats.jetstream.api.v1.pub_ack","error":{"code":503,"err_code":10039,"description":"jetstream not enabled"}}`,
	`{"stream":"S","seq":7} `,
	`{"stream":"S","seq":1e3}`,
	`not json`,
	``,
	`{"stream":"S",  "seq":7}`,
	`{"stream":"S","seq":7,"duplicate":  true}`,
)

// TestParseMatchesJetStream: every reply shape, the usual acks and the
// others, reads as jetstream reads it.
func TestParseMatchesJetStream(t *testing.T) {
	for _, r := range replies {
		got, err := Parse([]byte(r))
		want, wantErr := reference([]byte(r))
		if got != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Errorf("Parse(%s) = %+v, %v; jetstream reads %+v, %v", r, got, err, want, wantErr)
		}
	}
	_, err := Parse([]byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 4"},"stream":"S","seq":0}`))
	if !errors.Is(err, jetstream.ErrKeyExists) {
		t.Errorf("a wrong-last-sequence error is %v, want it to match jetstream.ErrKeyExists as jetstream's does", err)
	}
	for _, r := range written {
		if _, ok := parseFast([]byte(r)); !ok {
			t.Errorf("the usual ack %s was left to encoding/json", r)
		}
	}
}

func FuzzParseMatchesJetStream(f *testing.F) {
	for _, r := range replies {
		f.Add([]byte(r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Parse(data)
		want, wantErr := reference(data)
		if got != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("Parse(%q) = %+v, %v; jetstream reads %+v, %v", data, got, err, want, wantErr)
		}
	})
}
