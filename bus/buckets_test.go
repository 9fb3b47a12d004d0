package bus_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus/bustest"
)

// TestBucketReopen: opening a bucket again with the same settings keeps it
// as it is (with its values); with other settings it is updated.
func TestBucketReopen(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	js := b.JetStream()
	cfg := jetstream.KeyValueConfig{Bucket: "reopen", TTL: time.Hour, History: 2}
	kv, err := js.CreateOrUpdateKeyValue(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	again, err := js.CreateOrUpdateKeyValue(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := again.Get(t.Context(), "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("reopened bucket: got %v, %v; want the value kept", e, err)
	}
	cfg.TTL = 2 * time.Hour
	changed, err := js.CreateOrUpdateKeyValue(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := changed.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 2*time.Hour || st.History() != 2 {
		t.Fatalf("updated bucket: got ttl %s history %d, want 2h and 2", st.TTL(), st.History())
	}
}

// TestOpenBucket: OpenBucket makes a file-backed bucket with the asked-for
// TTL and description, opens it again as it is, and names it in its error.
func TestOpenBucket(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	kv, err := b.OpenBucket(t.Context(), "open-me", "what it holds", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(t.Context(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	again, err := b.OpenBucket(t.Context(), "open-me", "what it holds", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	st, err := again.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	if st.TTL() != time.Hour || info.Description != "what it holds" || info.Storage != jetstream.FileStorage || st.Values() != 1 {
		t.Errorf("bucket: ttl %s description %q storage %s values %d", st.TTL(), info.Description, info.Storage, st.Values())
	}
	if _, err := b.OpenBucket(t.Context(), "bad name", "", 0); err == nil || !strings.Contains(err.Error(), "bad name") {
		t.Errorf("bad bucket name: err %v, want one naming it", err)
	}
}
