package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/testenv"
)

// A bucket opened while the cluster has no quorum (two of three nodes
// down: no meta leader, no stream leader) is waited for, and Ready names
// it meanwhile, however many request timeouts pass; once the nodes are
// back the bucket opens. Before, OpenBucket failed with "context deadline
// exceeded" after one request timeout, and the process exited.
func TestOpenBucketWaitsForQuorum(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "the three-node cluster test")
	nodes := bustest.StartCluster(t, "q", 3)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	b, err := bus.Connect(ctx, bus.Config{URL: nodes[0].URL(), Prefix: "quorum", Name: t.Name(), Replicas: 3,
		RequestTimeout: 300 * time.Millisecond, Logger: testenv.Logger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	t.Cleanup(b.Close)
	nodes[1].Stop()
	nodes[2].Stop()

	opened := make(chan error, 1)
	var kv jetstream.KeyValue
	go func() {
		var err error
		kv, err = b.OpenBucket(ctx, "quorum_runs", "a bucket opened without quorum", 0)
		opened <- err
	}()
	testenv.Poll(t, 20*time.Second, func() (bool, string) {
		select {
		case err := <-opened:
			t.Fatalf("OpenBucket without quorum returned %v; want it to wait", err)
		default:
		}
		err := b.Ready(ctx)
		return errors.Is(err, bus.ErrWaiting) && strings.Contains(err.Error(), "bucket quorum_runs"),
			fmt.Sprintf("Ready: got %v, want it to name bucket quorum_runs", err)
	})
	select {
	case err := <-opened:
		t.Fatalf("OpenBucket without quorum returned %v; want it to wait", err)
	default:
	}

	nodes[1].Start()
	nodes[2].Start()
	if err := testenv.Receive(t, opened, 60*time.Second, "the bucket opened once the nodes are back"); err != nil {
		t.Fatalf("OpenBucket: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("put: %v", err)
	}
	testenv.Poll(t, 10*time.Second, func() (bool, string) {
		err := b.Ready(ctx)
		return err == nil, fmt.Sprintf("Ready: got %v, want nil", err)
	})
}

// A replica count a single server cannot hold stops start-up with an
// error naming the setting, instead of waiting for ever.
func TestReplicasTheServerCannotHold(t *testing.T) {
	t.Parallel()
	srv := bustest.NewRestartable(t, server.Options{})
	srv.Start()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := bus.Connect(ctx, bus.Config{URL: srv.URL(), Prefix: "replicas", Name: t.Name(), Replicas: 3})
	if !errors.Is(err, bus.ErrReplicas) || ctx.Err() != nil || !strings.Contains(err.Error(), "RELAY_STREAM_REPLICAS") {
		t.Fatalf("connect with replicas 3 to one server: got %v (ctx %v); want ErrReplicas naming RELAY_STREAM_REPLICAS, at once", err, ctx.Err())
	}
}

// A server refusing the credentials stops start-up with an error naming
// the settings, instead of waiting for ever.
func TestCredentialsRefused(t *testing.T) {
	t.Parallel()
	srv := bustest.NewRestartable(t, server.Options{Username: "relay", Password: "right"})
	srv.Start()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := bus.Connect(ctx, bus.Config{URL: "nats://relay:wrong@" + srv.Addr(), Name: t.Name()})
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "refuses the credentials") {
		t.Fatalf("connect with a wrong password: got %v (ctx %v); want the credentials named as refused", err, ctx.Err())
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Fatalf("the error shows the password: %v", err)
	}
}
