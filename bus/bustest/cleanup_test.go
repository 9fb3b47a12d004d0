package bustest_test

import (
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/envelope"
)

// TestExternalLeavesNothingBehind: a test on the machine's NATS leaves no
// stream behind, neither the bus's nor the key-value buckets and object
// stores its services created under the test's prefix (approvals'
// "{prefix}_approvals" and "{prefix}_elicit" used to stay, one pair a run).
func TestExternalLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	var prefix string
	t.Run("uses the bus", func(t *testing.T) {
		b := bustest.External(t)
		prefix = b.Prefix()
		ctx := t.Context()
		for _, name := range []string{prefix + "_approvals", prefix + "_elicit"} {
			kv, err := b.OpenBucket(ctx, name, "test bucket", 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.JetStream().CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: prefix + "_files"}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Publish(ctx, "in.github.issues", envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "x")); err != nil {
			t.Fatal(err)
		}
		names, err := bustest.Streams(ctx, b.JetStream(), prefix)
		if err != nil || len(names) < 6 {
			t.Fatalf("streams of prefix %s: got %v (%v), want the bus's 3 and 3 buckets' at least", prefix, names, err)
		}
	})
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	left, err := bustest.Streams(t.Context(), js, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("streams of prefix %s left after the test: %s", prefix, strings.Join(left, ", "))
	}
}
