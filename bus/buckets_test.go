package bus_test

import (
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
