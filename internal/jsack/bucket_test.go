package jsack_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/jsack"
)

// TestBucketWritesAsJetStream runs the same writes on two buckets, one
// through jsack.Bucket and one through jetstream alone, and wants the same
// revisions, values and errors: new keys, a create over a value, a delete
// and a purge marker, updates at the right and a wrong revision, and
// invalid keys.
func TestBucketWritesAsJetStream(t *testing.T) {
	b := bustest.Embedded(t)
	js, ctx := b.JetStream(), context.Background()
	open := func(name string) jetstream.KeyValue {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1})
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	fast, lib := jsack.Bucket(js, open("jsack_fast")), open("jsack_lib")
	if fast == lib {
		t.Fatal("jsack.Bucket returned the library's bucket for the relay's own")
	}
	type step struct {
		name string
		do   func(kv jetstream.KeyValue) (uint64, error)
	}
	steps := []step{
		{"put a", func(kv jetstream.KeyValue) (uint64, error) { return kv.Put(ctx, "a", []byte("1")) }},
		{"put string a", func(kv jetstream.KeyValue) (uint64, error) { return kv.PutString(ctx, "a", "2") }},
		{"create b", func(kv jetstream.KeyValue) (uint64, error) { return kv.Create(ctx, "b", []byte("1")) }},
		{"create b again", func(kv jetstream.KeyValue) (uint64, error) { return kv.Create(ctx, "b", []byte("2")) }},
		{"update b at 3", func(kv jetstream.KeyValue) (uint64, error) { return kv.Update(ctx, "b", []byte("3"), 3) }},
		{"update b at 3 again", func(kv jetstream.KeyValue) (uint64, error) { return kv.Update(ctx, "b", []byte("4"), 3) }},
		{"delete a", func(kv jetstream.KeyValue) (uint64, error) { return 0, kv.Delete(ctx, "a") }},
		{"create a over its delete marker", func(kv jetstream.KeyValue) (uint64, error) { return kv.Create(ctx, "a", []byte("5")) }},
		{"purge b", func(kv jetstream.KeyValue) (uint64, error) { return 0, kv.Purge(ctx, "b") }},
		{"create b over its purge marker", func(kv jetstream.KeyValue) (uint64, error) { return kv.Create(ctx, "b", []byte("6")) }},
		{"update c never written at 0", func(kv jetstream.KeyValue) (uint64, error) { return kv.Update(ctx, "c", []byte("7"), 0) }},
		{"put .bad", func(kv jetstream.KeyValue) (uint64, error) { return kv.Put(ctx, ".bad", []byte("x")) }},
		{"create a b", func(kv jetstream.KeyValue) (uint64, error) { return kv.Create(ctx, "a b", []byte("x")) }},
		{"update a*", func(kv jetstream.KeyValue) (uint64, error) { return kv.Update(ctx, "a*", []byte("x"), 1) }},
	}
	for _, s := range steps {
		gotRev, gotErr := s.do(fast)
		wantRev, wantErr := s.do(lib)
		if gotRev != wantRev || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Errorf("%s: jsack %d, %v; jetstream %d, %v", s.name, gotRev, gotErr, wantRev, wantErr)
		}
		for _, target := range []error{jetstream.ErrKeyExists, jetstream.ErrKeyRevisionMismatch, jetstream.ErrInvalidKey} {
			if errors.Is(gotErr, target) != errors.Is(wantErr, target) {
				t.Errorf("%s: errors.Is(%v, %v) differs from jetstream's", s.name, gotErr, target)
			}
		}
	}
	for _, key := range []string{"a", "b", "c"} {
		got, gotErr := fast.Get(ctx, key)
		want, wantErr := lib.Get(ctx, key)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || gotErr == nil && (string(got.Value()) != string(want.Value()) || got.Revision() != want.Revision()) {
			t.Errorf("key %s: jsack wrote %v, %v; jetstream %v, %v", key, got, gotErr, want, wantErr)
		}
	}
}
